from otter.test_files import test_case

OK_FORMAT = False

name = "q1_my_graph"
points = 1

@test_case(points=0, hidden=False)
def test_q1_my_graph_form(my_graph):
    from checks import public
    public.check('q1_my_graph', my_graph=my_graph)

