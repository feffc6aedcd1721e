from otter.test_files import test_case

OK_FORMAT = False

name = "q2_schemes"
points = 2

@test_case(points=0, hidden=False)
def test_q2_schemes_form(is_block_local, choose_scheme):
    from checks import public
    public.check('q2_schemes', is_block_local=is_block_local, choose_scheme=choose_scheme)

