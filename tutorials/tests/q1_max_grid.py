from otter.test_files import test_case

OK_FORMAT = False

name = "q1_max_grid"
points = 1

@test_case(points=0, hidden=False)
def test_q1_max_grid_form(max_grid):
    from checks import public
    public.check('q1_max_grid', max_grid=max_grid)

