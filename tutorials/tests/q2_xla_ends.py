from otter.test_files import test_case

OK_FORMAT = False

name = "q2_xla_ends"
points = 1

@test_case(points=0, hidden=False)
def test_q2_xla_ends_form(xla_ends):
    from checks import public
    public.check('q2_xla_ends', xla_ends=xla_ends)

