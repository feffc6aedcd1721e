from otter.test_files import test_case

OK_FORMAT = False

name = "q3_power_evaluations"
points = 1

@test_case(points=0, hidden=False)
def test_q3_power_evaluations_form(power_evaluations):
    from checks import public
    public.check('q3_power_evaluations', power_evaluations=power_evaluations)

