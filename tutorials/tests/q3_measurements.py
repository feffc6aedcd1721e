from otter.test_files import test_case

OK_FORMAT = False

name = "q3_measurements"
points = 1

@test_case(points=0, hidden=False)
def test_q3_measurements_form(n_measurements):
    from checks import public
    public.check('q3_measurements', n_measurements=n_measurements)

