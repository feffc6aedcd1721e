from otter.test_files import test_case

OK_FORMAT = False

name = "q1_tiny_blocks"
points = 1

@test_case(points=0, hidden=False)
def test_q1_tiny_blocks_form(tiny_per_wave, tiny_occupancy):
    from checks import public
    public.check('q1_tiny_blocks', tiny_per_wave=tiny_per_wave, tiny_occupancy=tiny_occupancy)

