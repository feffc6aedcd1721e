from otter.test_files import test_case

OK_FORMAT = False

name = "q3_my_subgraph"
points = 2

@test_case(points=0, hidden=False)
def test_q3_my_subgraph_form(my_subgraph):
    from checks import public
    public.check('q3_my_subgraph', my_subgraph=my_subgraph)

