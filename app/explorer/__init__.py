"""The astitch-sim explorer (Streamlit): one page, eight views of the same Plan.

Modules, one idea each:

* ``state``    -- the page's state: session keys, defaults, query parameters (shareable links);
* ``sidebar``  -- the inputs: catalog workload and shape, HLO (example, pasted, uploaded), GPU,
                  strategy, the what-if switches;
* ``compute``  -- compile / simulate / trace, cached, with progress for big shapes;
* ``style``    -- colours, the stitch-scheme legend, fonts for a projector;
* ``pictures`` -- Graphviz DOT built from a Plan (graph, kernel stages, memory chart);
* ``charts``   -- Altair charts (bars, thread-mapping grids, timelines);
* ``views/``   -- one module per view, each ``render(ctx)``.

The explorer reads only the public API (``import astitch_sim as asim``, ``gpu_backend``):
every fact it draws is written in the Plan, the SimResult or the GPU preset.
"""
