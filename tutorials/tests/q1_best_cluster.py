from otter.test_files import test_case

OK_FORMAT = False

name = "q1_best_cluster"
points = 1

@test_case(points=0, hidden=False)
def test_q1_best_cluster_form(best_cluster):
    from checks import public
    public.check('q1_best_cluster', best_cluster=best_cluster)

