// The tokenizer/config cross-check run at load, once both files are read: a tokenizer that does
// not fit the model fails there, with one Status, rather than at the end of a generation (an id
// the model sampled that no token has) or inside the embedding (an id past its rows).
#pragma once

#include "dsa/core/status.h"
#include "dsa/model/model_config.h"
#include "dsa/model/tokenizer.h"

namespace dsa::model {

// The rule: every id the tokenizer can produce is a row of the embedding, and every id the engine
// samples decodes. That is
//   1. tokenizer.vocab_size() (1 + its largest id) <= config.vocab_size: larger, encode can give an
//      id past the embedding. Smaller is a padded vocabulary, as real checkpoints ship it
//      (DeepSeek-V3.2: 128,815 tokenizer ids, vocab_size 129,280, rounded up for the GEMMs): the
//      ids past the tokenizer's are never sampled (sampleable_vocab; the engine masks them);
//   2. every id in [0, tokenizer.vocab_size()) names a token (the file leaves no hole);
//   3. config.json's bos_token_id and eos_token_id name tokens and, where the tokenizer knows
//      its own BOS or EOS (a well-known special added token, Tokenizer::bos_id), are that id. A
//      config without a BOS (GLM-5) skips the BOS half; an eos_token_id list must name tokens
//      only, and include the tokenizer's own EOS.
// kInvalidArgument naming the tokenizer file, the config key and both values otherwise. The
// shipped tiny model satisfies it exactly (6144 ids, BOS 0, EOS 1).
Status check_tokenizer_matches(const Tokenizer& tokenizer, const ModelConfig& config);

// The ids the engine may sample: [0, tokenizer.vocab_size()) for a tokenizer that passed the
// check (the padding rows of the LM head are masked), [0, config.vocab_size) without one.
int64_t sampleable_vocab(const Tokenizer* tokenizer, const ModelConfig& config);

}  // namespace dsa::model
