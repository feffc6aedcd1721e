from otter.test_files import test_case

OK_FORMAT = False

name = "q2_intensity"
points = 1

@test_case(points=0, hidden=False)
def test_q2_intensity_form(intensity):
    from checks import public
    public.check('q2_intensity', intensity=intensity)

