"""Kimi K3, the second Kimi format: its markers, reference parser and generated cases.

A K3 case says ``"format": "k3"``; an adapter parses the formats it declares
(``Adapter.formats``) and the matrix plans a cell only where the two meet, so judging, the
gate and the reports never ask which format a case is (docs/k3.md).
"""
