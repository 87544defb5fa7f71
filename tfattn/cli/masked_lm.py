"""`train.py`'s modes for a masked language model (task "masked_lm"):
sample fillings after training, masked-token evaluation, the export."""

from absl import logging

from tfattn.cli import errors
from tfattn.data import sources
from tfattn.data.masking import masker_for
from tfattn.training import model_io

__all__ = ["report_fillings", "run_eval", "run_export"]


def _fillings_lines(rows):
    for blanked, fillings, original in rows:
        # A filling is a word; the lone word-start piece is a space.
        best = ", ".join(f"{word or '(space)'} ({p:.2f})"
                         for word, p in fillings)
        yield f"  {blanked}\n    -> {best}\n    (text: {original})"


def report_fillings(model, tokenizer, spec, count, report):
    """Reports the top fillings of a blanked middle word of the first
    validation texts.

    Args:
        model: MaskedLM. The trained model.
        tokenizer: SubwordTokenizer (with the mask piece) or a BERT
            checkpoint's WordPieceTokenizer. Its vocabulary.
        spec: DatasetSpec. A monolingual spec.
        count: int. Validation texts read (at most 5 are filled).
        report: callable(str). Gets the fillings.
    """
    from tfattn.decoding import mlm_evaluation
    try:
        texts = [t for _, t in sources.load_pairs(spec, "validation",
                                                  limit=count)]
    except (FileNotFoundError, ValueError) as error:
        logging.info("No sample fillings: %s", error)
        return
    with errors.guard_memory("filling the validation samples",
                             lambda: "lower --samples"):
        rows = mlm_evaluation.sample_fillings(model, tokenizer, texts,
                                              count=min(count, 5))
    for line in _fillings_lines(rows):
        report(line)


def run_eval(command, report=logging.info, average_last=1):
    """`commands.run_eval` for a masked LM: masked-token accuracy and
    perplexity at the blanks of `command.eval_split`, and sample fillings.

    Args:
        command: commands.Command. The invocation (a monolingual dataset).
        report: callable(str). Gets the figures and fillings.
        average_last: int. Checkpoints averaged.

    Returns:
        dict. The metrics of `mlm_evaluation.evaluate_masked_lm`.
    """
    from tfattn.decoding import mlm_evaluation
    model, tokenizer, hp = model_io.restore_model(
        command.model_dir, average_last=average_last)
    split = command.eval_split
    texts = [t for _, t in sources.load_pairs(command.dataset, split)]
    with errors.guard_memory(f"scoring the {split} split",
                             lambda: "free memory, or evaluate on a machine "
                             "with more memory"):
        metrics = mlm_evaluation.evaluate_masked_lm(
            model, tokenizer, texts, masker_for(hp, tokenizer),
            command.model_dir, split)
    report(f"Masked-token accuracy on the {split} split: "
           f"{metrics['masked_accuracy']:.1%}, perplexity at the blanks "
           f"{metrics['masked_perplexity']:.2f} ({metrics['blanks']} blanks "
           f"in {metrics['texts']} texts)")
    for line in _fillings_lines(metrics["samples"]):
        report(line)
    return metrics


def run_export(command, export_dir, overwrite, report=logging.info,
               average_last=1):
    """`commands.run_export` for a masked LM: the SavedModel of
    `tfattn.export.export_masked_lm` (its `fill_mask` signature).

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
        ValueError: `--export_format=ctranslate2` (CTranslate2 has no
            encoder-only masked-LM model).
    """
    from tfattn import export
    if command.export_format == "ctranslate2":
        raise ValueError(
            "--export_format=ctranslate2: CTranslate2 serves translators "
            "and generators, not masked language models; export the "
            "SavedModel (--export_format=saved_model)")
    model, tokenizer, _ = model_io.restore_model(command.model_dir,
                                                 average_last=average_last)
    with errors.guard_memory("exporting", lambda: (
            "free memory used by other processes; nothing was replaced in "
            + export_dir)):
        path = export.export_masked_lm(model, tokenizer, export_dir,
                                       overwrite=overwrite)
    report(f"Exported a fill-mask model (SavedModel) to {path}")
    return path
