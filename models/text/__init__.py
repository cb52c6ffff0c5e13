"""The text layer that models and rewards stand on: tokens and the vocabulary with its extended (copy) ids, examples
and padded batches, record files read with errors that name file, line and field, and the installed word vectors."""
