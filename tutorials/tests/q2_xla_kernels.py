from otter.test_files import test_case

OK_FORMAT = False

name = "q2_xla_kernels"
points = 1

@test_case(points=0, hidden=False)
def test_q2_xla_kernels_form(xla_kernels):
    from checks import public
    public.check('q2_xla_kernels', xla_kernels=xla_kernels)

