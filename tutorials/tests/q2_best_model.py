from otter.test_files import test_case

OK_FORMAT = False

name = "q2_best_model"
points = 1

@test_case(points=0, hidden=False)
def test_q2_best_model_form(best_model):
    from checks import public
    public.check('q2_best_model', best_model=best_model)

