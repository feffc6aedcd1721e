from otter.test_files import test_case

OK_FORMAT = False

name = "q1_dominants"
points = 2

@test_case(points=0, hidden=False)
def test_q1_dominants_form(find_dominants, merge_dominants):
    from checks import public
    public.check('q1_dominants', find_dominants=find_dominants, merge_dominants=merge_dominants)

