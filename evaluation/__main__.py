"""RewardBench 2-style evaluation of a judge: `python -m evaluation --help`.
The implementation lives in evaluation/."""

from evaluation.cli import main

if __name__ == "__main__":
    main()
