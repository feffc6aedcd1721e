from otter.test_files import test_case

OK_FORMAT = False

name = "q4_traffic_ratio"
points = 1

@test_case(points=0, hidden=False)
def test_q4_traffic_ratio_form(traffic_ratio):
    from checks import public
    public.check('q4_traffic_ratio', traffic_ratio=traffic_ratio)

