"""Research experiments on built worlds: each answered one question once, and may read the oracle (they are world
tools, not the audit's). Run each as python -m world.experiments.NAME; what each asked, and where its figures are:

  decompose          where SPEC §2's pooled RM-vs-expert Pearson comes from, and how much is the draw (docs/calibration.md)
  fidelity           what the fast RM preset costs against the build's full one (docs/calibration.md)
  reward_ablation    what the audit's own policy would ship under other rewards (docs/results.md)
  standin_accuracy   how right the diagnostic's stand-in rubrics are against the hidden rubric (docs/results.md)
  diagnostic_noise   where one diagnostic risk's noise comes from: eval sample, stand-in draw or RL seed (docs/results.md)
  stress_labels      do the stress claim's hazard labels match SPEC §3's own, from the oracle (docs/diagnostic.md, results.md)
  diagnosis_bench    how often the gold-free diagnostic is right over the world zoo (docs/diagnostic.md, results.md)
  samples_coverage   are the samples door's estimates and release decisions right, against the oracle (docs/samples.md)
  interval_coverage  do the samples door's 95% intervals cover at the stated rate where decisions are made (docs/intervals.md)
  interval_methods   the finite-sample methods weighed against the door's interval, and what validity forces (docs/intervals.md)
  rounds_coverage    the rounds design (label until decided): coverage at every look, labels against the fixed design (docs/intervals.md)
  task_coverage      do the task door's quality intervals cover at a reduced gold budget (OUT/task_coverage.json)
"""
