from otter.test_files import test_case

OK_FORMAT = False

name = "q1_syncthreads"
points = 1

@test_case(points=0, hidden=False)
def test_q1_syncthreads_form(syncthreads):
    from checks import public
    public.check('q1_syncthreads', syncthreads=syncthreads)

