import os

import torch
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
torch.set_num_threads(int(os.environ.get("RLHF_THREADS", "2")))
