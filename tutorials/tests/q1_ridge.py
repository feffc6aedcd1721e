from otter.test_files import test_case

OK_FORMAT = False

name = "q1_ridge"
points = 1

@test_case(points=0, hidden=False)
def test_q1_ridge_form(ridge):
    from checks import public
    public.check('q1_ridge', ridge=ridge)

