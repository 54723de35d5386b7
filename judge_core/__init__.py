"""The base every other package builds on: the judge protocol (protocol/, standard library only: templates and
parsers, the wire format, judge.json), the settings every command and the reward config declare (settings), the
rule scorer (rules) and the rewards that train generative judges (grpo_rewards)."""
