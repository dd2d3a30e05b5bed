"""``k2conform history``: how each distinct behaviour of a parser changes across its releases.

A user gating an upgrade runs the release they have now; this says, for every behaviour the
findings report would show (``gate.behaviours``: the same outcome and differing fields in the
same delivery modes), which releases show it and the release it appeared or went away in.
"""
