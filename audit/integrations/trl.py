"""SamplesCallback: a TRL TrainerCallback that logs a GRPO (or RLOO) run's saved checkpoints into the samples table of
`python -m audit.samples` (needs `pip install rlhf-audit[trl]`).

    trainer = GRPOTrainer(model=..., reward_funcs=[...], args=GRPOConfig(..., save_steps=100), ...)
    trainer.add_callback(SamplesCallback(trainer, held_out, "samples.jsonl", family_key="category"))

Built as TRL's own callbacks are (trl.LogCompletionsCallback): it takes the trainer; every process generates for
its share of the held-out prompts (`accelerator.split_between_processes`) under the trainer's unwrapping for
generation (`trl.models.unwrap_model_for_generation`: DeepSpeed ZeRO-3 parameters gathered, FSDP's summoned), the
rows are gathered (`accelerate.utils.gather_object`) and only the main process (`state.is_world_process_zero`)
writes them. Each prompt is logged once per checkpoint whatever the number of processes.

When: at the start of training (`step-0`, the initial policy: the reference), on every save (`on_save`: a logged
run is a checkpoint that exists, its path in the row's `checkpoint` column) and at the end (unless that step was
saved and logged; its `checkpoint` is then null: save the final model to ship it). Set the trainer's save_steps to
the checkpoints you want audited. A resumed run (`train(resume_from_checkpoint=...)`) starts from step K: rows of
later steps already in the file (the interrupted attempt's, which the resumed run trains again) are marked
superseded (kept, ignored by the audit: audit.integrations.writer.SamplesWriter.supersede_after), and steps already
logged are skipped, so the table the audit reads is an uninterrupted run's.

How: as the trainer generates -- its prompt formatting (`trainer._tokenize_prompts`: the processing class's chat
template, the trainer's chat_template and chat_template_kwargs, for conversational prompts), its generation config
(`max_completion_length`, `temperature`, `top_p`, `top_k`, `min_p`, `repetition_penalty`, `generation_kwargs`), its
end-of-sequence handling and decoding -- in eval mode (no dropout: the policy as deployed). `generation={...}`
overrides settings; the settings used, the overrides and where each came from are recorded in every row's
`generation` column (a JSON text the audit shows per run). Sampling is seeded per (seed, step, batch of prompts)
inside torch.random.fork_rng: the training's random state is left as it was, and the samples do not depend on the
number of processes (the prompts are cut into the same batches whatever it is). A trainer that generates with vLLM
(`use_vllm`, colocate or server): the samples come from `model.generate` with the same sampling settings, not from
its vLLM engine -- a warning says so and the generation record says so (`engine`); it costs transformers'
generation speed (no paged attention or continuous batching: slower, more memory beside a colocated vLLM), and
vLLM-only generation_kwargs are not applied (recorded).

Proxy: TRL's reward contract -- the trainer's reward functions and reward_weights (or `reward_funcs=`,
`reward_weights=`), called with prompts, completions and completion_ids in TRL's formats, the prompts' other keys as
keyword columns, `trainer_state`, and no-op `log_extra` / `log_metric`; reward models (nn.Module) scored as TRL
scores them. `proxy_reward` is TRL's training reward of the sample: the weighted sum of the functions that returned
a number (a None or NaN is "not applicable" there, as TRL's nansum). Each function's value is kept in the row's
`rewards` column. A row gets no proxy (null) when every function returned None/NaN (TRL calls it unscorable) or
when a function raised or returned something unusable for it (its reward is then unknown): the row is still logged,
a warning is given once per function and cause, and training goes on; the audit counts such rows and certifies
their cells from the gold labels alone.

Not supported (a clear error at construction): multimodal prompts, and trainers that roll out with tools, an
environment_factory or a rollout_func (their multi-turn rollouts are not single generate calls)."""
from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import math
import os
import time
import warnings
from collections import Counter
from contextlib import nullcontext
from pathlib import Path

try:
    import torch
    from transformers import GenerationConfig, TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
except ImportError as e:                                   # pragma: no cover - depends on the environment
    raise ImportError(f"audit.integrations.trl needs torch and transformers ({e}): pip install rlhf-audit[trl]") \
        from e

from .writer import SamplesWriter

logger = logging.getLogger(__name__)
SAMPLING = ("max_new_tokens", "do_sample", "temperature", "top_p", "top_k", "min_p", "repetition_penalty")
NOT_IN_RECORD = ("pad_token_id", "bos_token_id", "eos_token_id", "disable_compile", "cache_implementation")


def _noop(*args, **kwargs):
    """log_extra / log_metric for reward functions: the callback's scoring stays out of the trainer's logs."""


def _as_number(v) -> float:
    """A reward function's value: a float (NaN for None or NaN: not applicable); ValueError when it is no number."""
    if v is None:
        return math.nan
    if isinstance(v, torch.Tensor):
        v = v.item()
    return float(v)


class SamplesCallback(TrainerCallback):
    """trainer: the TRL trainer (GRPOTrainer, RLOOTrainer) the callback is added to. prompts: held-out prompts, a
    list of dicts or a datasets.Dataset, each with "prompt" (text, or a list of chat messages), `id_key` and
    `family_key`; its other keys reach the reward functions as columns. out: a samples.jsonl path or a
    SamplesWriter."""

    def __init__(self, trainer, prompts, out, *, family_key: str = "family", id_key: str = "prompt_id",
                 reward_funcs=None, reward_weights=None, generation: dict | None = None, seed: int | None = None,
                 batch_size: int | None = None, log_first: bool = True, log_last: bool = True,
                 run_name: str = "step-{step}"):
        from trl.data_utils import is_conversational
        self.trainer, self.family_key, self.id_key, self.run_name = trainer, family_key, id_key, run_name
        self.prompts = [dict(p) for p in prompts]
        problems = [f"prompts[{i}]: missing {k!r}" for i, p in enumerate(self.prompts)
                    for k in ("prompt", id_key, family_key) if k not in p] or ([] if self.prompts else ["no prompts"])
        counts = Counter(str(p.get(id_key)) for p in self.prompts)
        problems += [f"{id_key} {x!r} given {n} times" for x, n in counts.items() if n > 1]
        if problems:
            raise ValueError("SamplesCallback: " + "; ".join(problems[:5]) + f" (each prompt needs 'prompt', "
                             f"{id_key!r} and the family key {family_key!r}, its {id_key} unique)")
        self.conversational = is_conversational({"prompt": self.prompts[0]["prompt"]})
        if any(is_conversational({"prompt": p["prompt"]}) != self.conversational for p in self.prompts):
            raise ValueError("SamplesCallback: prompts mix plain text and chat messages (TRL takes one kind)")
        for what in ("tools", "environment_factories", "rollout_func"):
            if getattr(trainer, what, None):
                raise ValueError(f"SamplesCallback: the trainer has {what}: its multi-turn rollouts are not what "
                                 "single generate calls sample, so they are not supported")
        for need in ("accelerator", "_tokenize_prompts", "processing_class"):
            if not hasattr(trainer, need):
                raise ValueError(f"SamplesCallback: the trainer has no {need!r}: expected a TRL GRPOTrainer or "
                                 "RLOOTrainer (trl>=1.12)")
        tok = getattr(trainer, "_tokenizer", None) or getattr(trainer.processing_class, "tokenizer",
                                                              trainer.processing_class)
        # the end-of-sequence ids the trainer cuts completions at (trl >= 1.16 keeps a list; 1.12 the tokenizer's)
        self.eos_ids = list(getattr(trainer, "eos_token_ids", None) or [tok.eos_token_id])
        self._rewards(trainer, reward_funcs, reward_weights)
        self.seed = int(trainer.args.seed if seed is None else seed)
        self.batch_size = int(batch_size or trainer.args.per_device_eval_batch_size)
        if self.batch_size < 1:
            raise ValueError(f"SamplesCallback: batch_size={self.batch_size}: expected an integer >= 1")
        self.gen_config, self.record = self._generation(trainer, dict(generation or {}))
        self.log_first, self.log_last = log_first, log_last
        self.writer = out if isinstance(out, SamplesWriter) else SamplesWriter(
            Path(out), rank=0 if trainer.is_world_process_zero() else 1)
        self.logged: list[str] = []        # runs this callback logged (the file may hold earlier ones)
        self.costs: list[dict] = []        # per logged checkpoint: each process's prompts generated and seconds
        self._warned: set = set()

    # ------------------------------------------------------------------------------------------- set-up
    def _rewards(self, trainer, funcs, weights) -> None:
        from trl.trainer.utils import get_callable_name
        if funcs is None:
            self.reward_funcs = list(trainer.reward_funcs)
            self.reward_names = list(trainer.reward_func_names)
            self.reward_classes = list(getattr(trainer, "reward_processing_classes", [None] * len(self.reward_funcs)))
            # the weights as the user gave them (the trainer keeps a float32 copy)
            w = weights if weights is not None else trainer.args.reward_weights \
                if getattr(trainer.args, "reward_weights", None) is not None else trainer.reward_weights
        else:
            self.reward_funcs = list(funcs) if isinstance(funcs, (list, tuple)) else [funcs]
            if not all(callable(f) and not isinstance(f, torch.nn.Module) for f in self.reward_funcs):
                raise ValueError("SamplesCallback: reward_funcs: expected callables (reward models: leave reward_funcs "
                                 "out and the trainer's own are used, as TRL scores them)")
            self.reward_names = [get_callable_name(f) for f in self.reward_funcs]
            self.reward_classes = [None] * len(self.reward_funcs)
            w = [1.0] * len(self.reward_funcs) if weights is None else weights
        self.reward_weights = [float(x) for x in (w.tolist() if isinstance(w, torch.Tensor) else w)]
        if len(self.reward_weights) != len(self.reward_funcs) or not self.reward_funcs:
            raise ValueError(f"SamplesCallback: {len(self.reward_weights)} reward weights for "
                             f"{len(self.reward_funcs)} reward functions")
        self.reward_names = [n or f"reward_{i}" for i, n in enumerate(self.reward_names)]   # a fresh model: ""
        if len(set(self.reward_names)) < len(self.reward_names):
            self.reward_names = [f"{n}_{i}" for i, n in enumerate(self.reward_names)]

    def _generation(self, trainer, overrides: dict):
        """(the GenerationConfig the samples are drawn with, its record): the trainer's own generation config (its
        generation_kwargs), or when it generates with vLLM the same sampling settings for model.generate; then the
        overrides."""
        vllm = bool(getattr(trainer, "use_vllm", False))
        base = getattr(trainer, "generation_kwargs", None)
        note = None
        if vllm or base is None:
            tok = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
            base = {"max_new_tokens": trainer.max_completion_length, "do_sample": True,
                    "pad_token_id": tok.pad_token_id, "bos_token_id": tok.bos_token_id,
                    "eos_token_id": self.eos_ids, "temperature": trainer.temperature,
                    "top_p": trainer.top_p, "top_k": trainer.top_k, "min_p": trainer.min_p,
                    "repetition_penalty": trainer.repetition_penalty}
            vllm_kwargs = trainer.args.generation_kwargs or {}
            mode = getattr(trainer, "vllm_mode", None)
            note = (f"the trainer generates with vLLM ({mode}); these samples come from transformers' model.generate "
                    "with its sampling settings (slower, no paged attention; vLLM-only generation_kwargs not "
                    f"applied: {json.dumps(vllm_kwargs, sort_keys=True, default=str)})") if vllm else None
            if vllm:
                warnings.warn(f"SamplesCallback: {note}", RuntimeWarning, stacklevel=3)
        merged = {**base, **overrides}
        config = GenerationConfig(**{k: v for k, v in merged.items() if k != "disable_compile"}, disable_compile=True)
        sampling = {k: getattr(config, k, None) for k in SAMPLING}
        sampling.update({k: v for k, v in merged.items() if k not in SAMPLING and k not in NOT_IN_RECORD})
        record = {"engine": "transformers generate" + (" (not the trainer's vLLM engine)" if vllm else ""),
                  "source": "the trainer's generation settings" + (", with overrides" if overrides else ""),
                  "sampling": sampling, "overrides": overrides, "vllm_fallback": note,
                  "prompts": "chat template (the trainer's)" if self.conversational else "text",
                  "mode": "eval", "seed": self.seed, "batch_size": self.batch_size,
                  "proxy": {"reward_funcs": self.reward_names, "reward_weights": self.reward_weights}}
        return config, json.dumps(record, sort_keys=True, separators=(",", ":"), default=str)

    # ------------------------------------------------------------------------------------------- events
    @property
    def runs(self) -> list[str]:
        """Every run in force in the samples file, those of earlier (interrupted) attempts included."""
        return self.writer.runs

    def on_train_begin(self, args, state, control, **kwargs):
        # a run that starts from step K trains every later step again: rows of those steps are superseded
        gone = self.writer.supersede_after(state.global_step, f"training started again from step "
                                           f"{state.global_step}: this step was trained again")
        if gone:
            logger.warning(f"SamplesCallback: started from step {state.global_step}: rows of {', '.join(gone)} "
                           "marked superseded (kept in the file, ignored by the audit)")
        if self.log_first:
            path = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            self.log_checkpoint(state, path if state.global_step and os.path.isdir(path) else None)

    def on_save(self, args, state, control, **kwargs):
        self.log_checkpoint(state, os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"))

    def on_train_end(self, args, state, control, **kwargs):
        if self.log_last:
            self.log_checkpoint(state, None)

    # ------------------------------------------------------------------------------------------- logging
    def log_checkpoint(self, state, checkpoint: str | None = None) -> bool:
        """Sample, score and append the current model as run `step-N` (N = state.global_step); every process must
        call it. False (nothing logged) when the file has that run already, or when a process failed (warned:
        training goes on)."""
        from accelerate.utils import broadcast_object_list, gather_object
        step = int(state.global_step)
        run = self.run_name.format(step=step)
        acc = self.trainer.accelerator
        done = [self.writer.has_run(run)]
        if acc.num_processes > 1:       # the main process's file decides (another node may not see it): in step
            broadcast_object_list(done, from_process=0)
        if done[0]:
            return False
        n_batches = math.ceil(len(self.prompts) / self.batch_size)
        t0, c0 = time.perf_counter(), time.process_time()
        rows, generated, gen_cpu, error = [], 0, 0.0, None
        try:
            with acc.split_between_processes(list(range(n_batches)), apply_padding=self._lockstep) as mine:
                mine = list(mine)
            rows, generated, gen_cpu = self._samples(mine, state, run, checkpoint)
        except Exception as e:  # noqa: BLE001 - a logging failure must not stop training; every process hears of it
            error = f"{type(e).__name__}: {e}"
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        parts = gather_object([{"process": acc.process_index, "rows": rows, "error": error, "prompts": generated,
                                "seconds": seconds, "cpu_seconds": cpu, "generate_cpu_seconds": gen_cpu}])
        self.costs.append({"run": run, "step": step, "processes": [
            {k: p[k] for k in ("process", "prompts", "seconds", "cpu_seconds", "generate_cpu_seconds")}
            for p in parts]})
        errors = [f"process {p['process']}: {p['error']}" for p in parts if p["error"]]
        if errors:
            warnings.warn(f"SamplesCallback: {run} not logged ({errors[0]}); training goes on", RuntimeWarning)
            return False
        by_prompt = {}
        for p in parts:
            for i, row in p["rows"]:
                by_prompt.setdefault(i, row)          # a batch repeated to keep processes in step counts once
        rows = [by_prompt[i] for i in sorted(by_prompt)]
        self.writer.enabled = bool(state.is_world_process_zero)
        try:
            self.writer.log_many(rows)
        except Exception as e:  # noqa: BLE001 - a full disk, say: named, training goes on
            warnings.warn(f"SamplesCallback: {run} not written to {self.writer.path} ({type(e).__name__}: {e}); "
                          "training goes on", RuntimeWarning)
            return False
        self.logged.append(run)
        missing = sum(r["proxy_reward"] is None for r in rows)
        logger.info(f"SamplesCallback: {run}: {len(rows)} samples"
                    + (f" ({missing} without a proxy)" if missing else "") + "; generated per process: "
                    + ", ".join(f"{p['prompts']} prompts in {p['seconds']:.2f} s" for p in parts))
        return True

    @property
    def _lockstep(self) -> bool:
        """Whether generation may be collective (ZeRO-3 without gathered parameters, FSDP): every process then runs
        as many generate calls (the last batch repeated where the batches do not divide evenly)."""
        from accelerate.utils import DistributedType
        return self.trainer.accelerator.distributed_type in (DistributedType.DEEPSPEED, DistributedType.FSDP)

    def _samples(self, batches: list[int], state, run: str, checkpoint) -> tuple[list, int, float]:
        """[(prompt index, row)] of this process's batches, the prompts it generated for, and the CPU seconds its
        generate calls took."""
        from trl.models import unwrap_model_for_generation
        tr, acc = self.trainer, self.trainer.accelerator
        kw = {"gather_deepspeed3_params": getattr(tr.args, "ds3_gather_for_generation", True),
              "gradient_checkpointing_kwargs": tr.args.gradient_checkpointing_kwargs}
        params = inspect.signature(unwrap_model_for_generation).parameters
        kw = {k: v for k, v in kw.items() if k in params}
        dist = getattr(tr, "_dist", None)
        summon = dist.summon_full_params(tr.model_wrapped, recurse=False) if dist is not None else nullcontext()
        forked = [acc.device.index or 0] if acc.device.type == "cuda" else []
        out, seen, generated, cpu = [], set(), 0, 0.0
        with unwrap_model_for_generation(tr.model_wrapped, acc, **kw) as model, torch.no_grad(), summon:
            was_training = model.training
            model.eval()
            try:
                with torch.random.fork_rng(devices=forked):
                    for b in batches:
                        idx = list(range(b * self.batch_size, min((b + 1) * self.batch_size, len(self.prompts))))
                        torch.manual_seed(self._batch_seed(state.global_step, b))
                        c0 = time.process_time()
                        got = self._generate(model, [self.prompts[i]["prompt"] for i in idx])
                        cpu += time.process_time() - c0
                        generated += len(idx)
                        if b not in seen:
                            out.append((idx, got))
                        seen.add(b)
            finally:
                if was_training:
                    model.train()
        rows = []
        for idx, (prompt_ids, completion_ids) in out:
            rows += self._rows(idx, prompt_ids, completion_ids, state, run, checkpoint)
        return rows, generated, cpu

    def _batch_seed(self, step: int, batch: int) -> int:
        h = hashlib.sha256(f"{self.seed}\x00{step}\x00{batch}".encode()).digest()
        return int.from_bytes(h[:8], "big") % (2**63 - 1)

    def _generate(self, model, prompts: list) -> tuple[list, list]:
        """(prompt token ids, completion token ids cut after the first end-of-sequence token), as the trainer's
        regular generation path makes them."""
        tr, device = self.trainer, self.trainer.accelerator.device
        prompt_ids, images, extra = tr._tokenize_prompts(prompts)
        if images is not None or extra:
            raise ValueError("multimodal prompts are not supported by SamplesCallback")
        pad = self.gen_config.pad_token_id
        pad = pad if pad is not None else self.eos_ids[0]
        width = max(len(p) for p in prompt_ids)
        multiple = getattr(tr, "pad_to_multiple_of", None)
        if multiple:
            width = math.ceil(width / multiple) * multiple
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompt_ids], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids], device=device)
        gen = model.generate(input_ids=ids, attention_mask=mask, generation_config=self.gen_config)
        comp = gen[:, width:].cpu()
        eos = torch.isin(comp, torch.tensor(self.eos_ids))
        ends = torch.where(eos.any(1), eos.int().argmax(1), torch.full((len(comp),), comp.shape[1]))
        return [list(p) for p in prompt_ids], [c[: int(e) + 1].tolist() for c, e in zip(comp, ends)]

    def _rows(self, idx: list[int], prompt_ids, completion_ids, state, run: str, checkpoint) -> list:
        tr = self.trainer
        texts = tr.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
        batch = [self.prompts[i] for i in idx]
        prompts = [p["prompt"] for p in batch]
        completions = [[{"role": "assistant", "content": t}] for t in texts] if self.conversational else texts
        shown = (tr.processing_class.batch_decode(prompt_ids, skip_special_tokens=False) if self.conversational
                 else prompts)
        values, failed = self._score(prompts, completions, completion_ids, batch, state)
        rows = []
        for k, (i, p) in enumerate(zip(idx, batch)):
            per = {n: (None if failed[j][k] or math.isnan(values[j][k]) else values[j][k])
                   for j, n in enumerate(self.reward_names)}
            got = [w * values[j][k] for j, w in enumerate(self.reward_weights) if not math.isnan(values[j][k])]
            proxy = None if any(failed[j][k] for j in range(len(values))) or not got else math.fsum(got)
            row = self.writer.row(run, p[self.family_key], p[self.id_key], texts[k], proxy, prompt=shown[k],
                                  step=state.global_step, checkpoint=checkpoint, rewards=per,
                                  generation=self.record)
            rows.append((i, row))
        if any(r["proxy_reward"] is None for _, r in rows):
            self._warn_once("unscorable", "some rows have no proxy (every reward function returned None or NaN "
                            "for them, or one failed): logged without one; the audit counts them")
        return rows

    def _score(self, prompts, completions, completion_ids, batch, state) -> tuple[list, list]:
        """Per reward function, its values (NaN: None or NaN, not applicable) and per row whether it failed."""
        n = len(prompts)
        columns = {k: [p.get(k) for p in batch] for k in batch[0] if k not in ("prompt", "completion",
                                                                                "completion_ids")}
        kwargs = {**columns, "trainer_state": state, "log_extra": _noop, "log_metric": _noop}
        values, failed = [], []
        for func, name, cls in zip(self.reward_funcs, self.reward_names, self.reward_classes):
            vals, bad = [math.nan] * n, [True] * n
            try:
                if isinstance(func, torch.nn.Module):
                    out = self._model_reward(func, cls, prompts, completions)
                else:
                    out = func(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
                    if inspect.isawaitable(out):
                        out = asyncio.run(_awaited(out))
                out = list(out)
                if len(out) != n:
                    raise ValueError(f"returned {len(out)} rewards for {n} completions")
                for k, v in enumerate(out):
                    try:
                        vals[k], bad[k] = _as_number(v), False
                    except (TypeError, ValueError):
                        self._warn_once((name, "value"), f"reward function {name!r} returned {v!r}, no number: "
                                        "those rows are logged without a proxy")
            except Exception as e:  # noqa: BLE001 - a reward that fails must not stop training
                self._warn_once((name, "raised"), f"reward function {name!r} raised {type(e).__name__}: {e}; the "
                                "rows it was to score are logged without a proxy, training goes on")
            values.append(vals)
            failed.append(bad)
        return values, failed

    def _model_reward(self, model, processing_class, prompts, completions) -> list:
        """A reward model's score of each completion, as GRPOTrainer computes it (logits[:, 0])."""
        from trl.data_utils import apply_chat_template
        if self.conversational:
            kw = getattr(self.trainer, "chat_template_kwargs", None) or {}
            texts = [apply_chat_template({"messages": p + c}, processing_class, **kw)["text"]
                     for p, c in zip(prompts, completions)]
        else:
            texts = [p + c for p, c in zip(prompts, completions)]
        inputs = processing_class(text=texts, return_tensors="pt", padding=True, padding_side="right",
                                  add_special_tokens=False)
        inputs = {k: v.to(self.trainer.accelerator.device) for k, v in inputs.items()}
        with torch.inference_mode():
            return model(**inputs).logits[:, 0].float().cpu().tolist()

    def _warn_once(self, key, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"SamplesCallback: {message}", RuntimeWarning, stacklevel=2)


async def _awaited(x):
    return await x
