from otter.test_files import test_case

OK_FORMAT = False

name = "q4_shuffle"
points = 1

@test_case(points=0, hidden=False)
def test_q4_shuffle_form(warp_row_sum):
    from checks import public
    public.check('q4_shuffle', warp_row_sum=warp_row_sum)

