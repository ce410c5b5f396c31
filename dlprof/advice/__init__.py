"""From statistics to advice: the throughput model (model.py) and the recommendation rules (rules.py)."""
