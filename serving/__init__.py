"""The HTTP judge server: `python -m serving --model DIR` (or `--judge rule`) answers /judge, /batch_judge,
/compare, /batch_compare, /judge_group, /openrlhf/reward, /health and /metrics for every judge kind (scalar
Bradley-Terry or multi-aspect, generative pointwise and pairwise, rule), on the transformers or the vLLM engine,
with dynamic batching. Scale-out on Ray Serve: `python -m serving.ray_serve --model DIR --replicas N`.
See serving/README.md."""
