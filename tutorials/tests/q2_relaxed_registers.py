from otter.test_files import test_case

OK_FORMAT = False

name = "q2_relaxed_registers"
points = 1

@test_case(points=0, hidden=False)
def test_q2_relaxed_registers_form(relaxed_registers):
    from checks import public
    public.check('q2_relaxed_registers', relaxed_registers=relaxed_registers)

