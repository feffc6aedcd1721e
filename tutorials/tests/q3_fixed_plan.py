from otter.test_files import test_case

OK_FORMAT = False

name = "q3_fixed_plan"
points = 1

@test_case(points=0, hidden=False)
def test_q3_fixed_plan_form(fixed_plan):
    from checks import public
    public.check('q3_fixed_plan', fixed_plan=fixed_plan)

