from otter.test_files import test_case

OK_FORMAT = False

name = "q4_global_values"
points = 1

@test_case(points=0, hidden=False)
def test_q4_global_values_form(global_values):
    from checks import public
    public.check('q4_global_values', global_values=global_values)

