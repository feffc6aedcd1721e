from otter.test_files import test_case

OK_FORMAT = False

name = "q4_flop_ratio"
points = 1

@test_case(points=0, hidden=False)
def test_q4_flop_ratio_form(flop_ratio):
    from checks import public
    public.check('q4_flop_ratio', flop_ratio=flop_ratio)

