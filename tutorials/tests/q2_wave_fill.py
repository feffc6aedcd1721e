from otter.test_files import test_case

OK_FORMAT = False

name = "q2_wave_fill"
points = 1

@test_case(points=0, hidden=False)
def test_q2_wave_fill_form(xla_fill, astitch_fill):
    from checks import public
    public.check('q2_wave_fill', xla_fill=xla_fill, astitch_fill=astitch_fill)

