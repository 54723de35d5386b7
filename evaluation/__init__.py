"""RewardBench 2-style evaluation of any judge (a running judge server, or a model directory loaded with
serving's judge classes): data checks (data), the official scoring (scoring), judge access (judges),
the run (run) and its outputs (report). The command is `python -m evaluation`."""
