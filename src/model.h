/* model.h - the loaded model: hyperparameters, the unrolled-layer plan, weight views. */
#ifndef MOR_MODEL_H
#define MOR_MODEL_H
#include "mor.h"
#include "gguf.h"
#include "tokenizer.h"

/* Borrowed view of the model's tokenizer (NULL if it has none). */
const mor_tokenizer *model_tokenizer(const mor_model *m);

#endif
