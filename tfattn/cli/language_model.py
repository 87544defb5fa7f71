"""`train.py`'s modes for a language model (task "language_model"):
sample continuations after training, perplexity evaluation, the export."""

from absl import logging

from tfattn.cli import errors
from tfattn.data import sources
from tfattn.training import model_io

__all__ = ["report_continuations", "run_eval", "run_export"]


def report_continuations(model, tokenizer, spec, count, report):
    """Reports greedy continuations of the first validation texts (the
    first half of each text's words as the prompt).

    Args:
        model: CausalLM. The trained model.
        tokenizer: SubwordTokenizer. Its vocabulary.
        spec: DatasetSpec. A monolingual spec.
        count: int. Validation texts read (at most 5 are continued).
        report: callable(str). Gets the continuations.
    """
    from tfattn.decoding import lm_evaluation
    try:
        texts = [t for _, t in sources.load_pairs(spec, "validation",
                                                  limit=count)]
    except (FileNotFoundError, ValueError) as error:
        logging.info("No sample continuations: %s", error)
        return
    with errors.guard_memory("continuing the validation samples",
                             lambda: "lower --samples"):
        rows = lm_evaluation.sample_continuations(model, tokenizer, texts,
                                                  count=min(count, 5))
    for prompt, continued, original in rows:
        report(f"  {prompt}\n    -> {continued}\n    (text: {original})")


def run_eval(command, report=logging.info, average_last=1):
    """`commands.run_eval` for a language model: perplexity per subword
    and per word on `command.eval_split`, and sample continuations.

    Args:
        command: commands.Command. The invocation (a monolingual dataset).
        report: callable(str). Gets the perplexities and continuations.
        average_last: int. Checkpoints averaged
            (`commands.decoding_settings`).

    Returns:
        dict. The metrics of `lm_evaluation.evaluate_language_model`.
    """
    from tfattn.decoding import lm_evaluation
    model, tokenizer, _ = model_io.restore_model(
        command.model_dir, average_last=average_last)
    split = command.eval_split
    texts = [t for _, t in sources.load_pairs(command.dataset, split)]
    with errors.guard_memory(f"scoring the {split} split",
                             lambda: "free memory, or evaluate on a machine "
                             "with more memory"):
        metrics = lm_evaluation.evaluate_language_model(
            model, tokenizer, texts, command.model_dir, split)
    report(f"Perplexity on the {split} split: "
           f"{metrics['perplexity_per_subword']:.2f} per subword, "
           f"{metrics['perplexity_per_word']:.2f} per word "
           f"({metrics['texts']} texts, {metrics['words']} words)")
    for prompt, continued, _ in metrics["samples"]:
        report(f"  {prompt}\n    -> {continued}")
    return metrics


def run_export(command, export_dir, overwrite, report=logging.info,
               average_last=1):
    """`commands.run_export` for a language model: the SavedModel of
    `tfattn.export.export_language_model` (continuations of at most the
    hparams' `decode_extra_length` pieces), or with
    `--export_format=ctranslate2` a CTranslate2 `Generator` directory
    (`tfattn.export.causal_lm_to_ctranslate2`).

    Args:
        command: commands.Command. The invocation (a monolingual dataset).
        export_dir: str. Where the export goes (checked by the caller).
        overwrite: bool. Replace an existing `export_dir`.
        report: callable(str). Gets the line naming the export.
        average_last: int. Checkpoints averaged.

    Returns:
        str. The path of the export.

    Raises:
        errors.OutOfMemory: the export ran out of memory.
    """
    from tfattn import export
    model, tokenizer, hp = model_io.restore_model(command.model_dir,
                                                  average_last=average_last)
    ctranslate2 = command.export_format == "ctranslate2"
    with errors.guard_memory("exporting", lambda: (
            "free memory used by other processes; nothing was replaced in "
            + export_dir)):
        if ctranslate2:
            path = export.causal_lm_to_ctranslate2(
                model, tokenizer, export_dir, overwrite=overwrite,
                quantization=command.ctranslate2_quantization,
                max_new_tokens=hp.decode_extra_length)
            weights = command.ctranslate2_quantization or "float32"
            kind = f"CTranslate2 generator ({weights} weights)"
        else:
            path = export.export_language_model(
                model, tokenizer, export_dir,
                max_new_tokens=hp.decode_extra_length, overwrite=overwrite)
            kind = "prompt-to-continuation language model (SavedModel)"
    report(f"Exported a {kind} to {path}")
    return path
