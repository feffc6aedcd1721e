from otter.test_files import test_case

OK_FORMAT = False

name = "q1_mean_writer"
points = 1

@test_case(points=0, hidden=False)
def test_q1_mean_writer_form(mean_writer):
    from checks import public
    public.check('q1_mean_writer', mean_writer=mean_writer)

