from otter.test_files import test_case

OK_FORMAT = False

name = "q3_schemes"
points = 1

@test_case(points=0, hidden=False)
def test_q3_schemes_form(schemes):
    from checks import public
    public.check('q3_schemes', schemes=schemes)

