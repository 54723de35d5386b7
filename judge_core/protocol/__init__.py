"""The judge protocol, standard library only: the judge prompt templates and the parsers of judge answers
(templates), the HTTP API's request content and answers (judge_api), and what an exported judge directory
declares (judge_spec). Every other layer (the client, serving, training, evaluation, data_prep) speaks it."""
