from otter.test_files import test_case

OK_FORMAT = False

name = "q2_x_loads"
points = 1

@test_case(points=0, hidden=False)
def test_q2_x_loads_form(x_loads):
    from checks import public
    public.check('q2_x_loads', x_loads=x_loads)

