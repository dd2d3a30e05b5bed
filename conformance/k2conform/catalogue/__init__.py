"""The findings catalogue (``k2conform catalogue``, docs/findings-catalogue.md): one minimised
corpus case and one upstream-ready bug report per distinct behaviour of each parser, under
``corpus/findings/catalogue/<adapter>/``, with an index of what is and is not reported upstream.

A behaviour is what the report calls one (:func:`k2conform.gate.behaviours.behaviours`, the one
rule); its example is shrunk with the minimiser (:mod:`k2conform.minimize.delta_debug`) while
the same adapter, through the one cell path (:func:`k2conform.run.cell.run_cell`), still shows
the same outcome and differing fields in the same delivery mode.  Catalogue cases are not part
of the matrix corpus; ``k2conform catalogue check`` re-runs each through its own adapter.
"""
