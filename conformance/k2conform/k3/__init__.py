"""Kimi K3, the second Kimi format family: its markers, reference parser and generated cases.

A K3 case says ``"family": "k3"``; an adapter parses the families it declares
(``Adapter.families``) and the matrix plans a cell only where the two meet, so judging, the
gate and the reports never ask which family a case is (docs/k3.md).
"""
