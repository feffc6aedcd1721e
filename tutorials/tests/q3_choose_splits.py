from otter.test_files import test_case

OK_FORMAT = False

name = "q3_choose_splits"
points = 2

@test_case(points=0, hidden=False)
def test_q3_choose_splits_form(choose_splits):
    from checks import public
    public.check('q3_choose_splits', choose_splits=choose_splits)

