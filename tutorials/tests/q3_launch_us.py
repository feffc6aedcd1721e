from otter.test_files import test_case

OK_FORMAT = False

name = "q3_launch_us"
points = 1

@test_case(points=0, hidden=False)
def test_q3_launch_us_form(launch_us):
    from checks import public
    public.check('q3_launch_us', launch_us=launch_us)

