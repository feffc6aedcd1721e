from otter.test_files import test_case

OK_FORMAT = False

name = "q4_waves"
points = 1

@test_case(points=0, hidden=False)
def test_q4_waves_form(dien_waves):
    from checks import public
    public.check('q4_waves', dien_waves=dien_waves)

