from otter.test_files import test_case

OK_FORMAT = False

name = "q4_races"
points = 1

@test_case(points=0, hidden=False)
def test_q4_races_form(race_node, race_count):
    from checks import public
    public.check('q4_races', race_node=race_node, race_count=race_count)

