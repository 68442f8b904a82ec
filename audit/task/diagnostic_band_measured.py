"""The band of the diagnostic's three calls, as measured (audit/task/diagnostic_band.py reads it). Written by
python -m world.experiments.diagnostic_band docs/data/diagnostic_band/D1-canonical-rescale-4901.json docs/data/diagnostic_band/D2-fulllut-uniform-mild-4902.json --settle-seconds 205 --write audit/task/diagnostic_band_measured.py
-- do not edit by hand; docs/diagnostic.md, "Three calls"."""
MEASURED = {'about': "The band of the diagnostic's three calls (audit/task/diagnostic_band.py), measured; docs/diagnostic.md "
          "'Three calls'.",
 'command': 'python -m world.experiments.diagnostic_band docs/data/diagnostic_band/D1-canonical-rescale-4901.json '
            'docs/data/diagnostic_band/D2-fulllut-uniform-mild-4902.json --settle-seconds 205 --write '
            'audit/task/diagnostic_band_measured.py',
 'bands': [{'recipe': {'steps': 250,
                       'lr': 0.001,
                       'kl_coef': 0.02,
                       'batch_prompts': 32,
                       'samples_per_prompt': 8,
                       'prior_counts': 'sampled'},
            'replicates': 1,
            'default': True,
            'below': 0.09044339083707809,
            'above': 0.13706595851391223,
            'level': 0.99,
            'residuals': 252,
            'window': 0.5,
            'basis': "99% conformal quantiles of 252 residuals of one run at 250 steps at lr 0.001 against SPEC's "
                     '1,500-step risk (risks clipped to 0.3-1.3), on benches rescale seed 4901 on canonical (8 '
                     'RMs, 3 replicates); uniform-mild seed 4902 on full-lut (6 RMs, 3 replicates) (python -m '
                     'world.experiments.diagnostic_band)'}],
 'settle': {'steps': 750, 'lr': 0.0006, 'replicates': 3, 'seconds_2_threads': 205.0}}
