"""The band of the diagnostic's three calls, as measured (audit/task/diagnostic_band.py reads it). Written by
python -m world.experiments.diagnostic_band docs/data/diagnostic_band/D1-canonical-rescale-4901.json docs/data/diagnostic_band/D2-fulllut-uniform-mild-4902.json docs/data/diagnostic_band/D3-canonical-collateral-4921.json docs/data/diagnostic_band/V1-canonical-collateral-4911.json docs/data/diagnostic_band/V2-canonical-mixed-4912.json docs/data/diagnostic_band/V3-canonical-uniform-4913.json docs/data/diagnostic_band/V4-fulllut-collateral-4914.json --settle-seconds 205 --write audit/task/diagnostic_band_measured.py
-- do not edit by hand; docs/diagnostic.md, "Three calls"."""
MEASURED = {'about': "The band of the diagnostic's three calls (audit/task/diagnostic_band.py), measured; docs/diagnostic.md "
          "'Three calls'.",
 'command': 'python -m world.experiments.diagnostic_band docs/data/diagnostic_band/D1-canonical-rescale-4901.json '
            'docs/data/diagnostic_band/D2-fulllut-uniform-mild-4902.json '
            'docs/data/diagnostic_band/D3-canonical-collateral-4921.json '
            'docs/data/diagnostic_band/V1-canonical-collateral-4911.json '
            'docs/data/diagnostic_band/V2-canonical-mixed-4912.json '
            'docs/data/diagnostic_band/V3-canonical-uniform-4913.json '
            'docs/data/diagnostic_band/V4-fulllut-collateral-4914.json --settle-seconds 205 --write '
            'audit/task/diagnostic_band_measured.py',
 'bands': [{'recipe': {'steps': 250,
                       'lr': 0.001,
                       'kl_coef': 0.02,
                       'batch_prompts': 32,
                       'samples_per_prompt': 8,
                       'prior_counts': 'sampled'},
            'replicates': 1,
            'default': True,
            'below': 0.13186654586394497,
            'above': 0.12482857893880417,
            'level': 0.99,
            'residuals': 504,
            'window': 0.5,
            'basis': "99% conformal quantiles of 504 residuals of one run at 250 steps at lr 0.001 against SPEC's "
                     '1,500-step risk (risks clipped to 0.3-1.3), on benches rescale seed 4901 on canonical (8 '
                     'RMs, 3 replicates); uniform-mild seed 4902 on full-lut (6 RMs, 3 replicates); collateral '
                     'seed 4921 on canonical (6 RMs, 3 replicates); collateral seed 4911 on canonical (6 RMs, 1 '
                     'replicate); mixed seed 4912 on canonical (6 RMs, 1 replicate); uniform seed 4913 on '
                     'canonical (6 RMs, 1 replicate); collateral seed 4914 on full-lut (6 RMs, 1 replicate) '
                     '(python -m world.experiments.diagnostic_band)'},
           {'recipe': {'steps': 250,
                       'lr': 0.001,
                       'kl_coef': 0.02,
                       'batch_prompts': 32,
                       'samples_per_prompt': 8,
                       'prior_counts': 'sampled'},
            'replicates': 3,
            'default': False,
            'below': 0.08054872859880124,
            'above': 0.10713241650198602,
            'level': 0.99,
            'residuals': 120,
            'window': 0.5,
            'basis': '99% conformal quantiles of 120 residuals of the mean of 3 replicates at 250 steps at lr '
                     "0.001 against SPEC's 1,500-step risk (risks clipped to 0.3-1.3), on benches rescale seed "
                     '4901 on canonical (8 RMs, 3 replicates); uniform-mild seed 4902 on full-lut (6 RMs, 3 '
                     'replicates); collateral seed 4921 on canonical (6 RMs, 3 replicates) (python -m '
                     'world.experiments.diagnostic_band)'}],
 'settle': {'steps': 750, 'lr': 0.0006, 'replicates': 3, 'seconds_2_threads': 205.0}}
