from otter.test_files import test_case

OK_FORMAT = False

name = "q3_packing"
points = 1

@test_case(points=0, hidden=False)
def test_q3_packing_form(packed_owner):
    from checks import public
    public.check('q3_packing', packed_owner=packed_owner)

