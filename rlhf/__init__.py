"""rlhf: a tiny pure-torch RLHF pipeline (policy, reward model, SFT, RM training, KL-regularised REINFORCE,
best-of-n, dev evaluation). See SPEC §1 for the vocabulary, record formats and checkpoint format."""
