// braid generate / braid chat.
#include <cstdio>
#include <iostream>
#include <span>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/file_util.h"
#include "cli/model_options.h"
#include "engine/model.h"

namespace braid::cli {
namespace {

// Tokens to generate, top-k and the penalty window: 1 Mi is more than any
// context holds, and keeps every product of them far from int overflow.
constexpr long long kMaxTokens = 1 << 20;

const char* kGenerateHelp =
    "usage: braid generate [-m MODEL] -p TEXT [options]\n"
    "       braid chat [-m MODEL] [-p MESSAGE] [--system TEXT] [options]\n"
    "\n"
    "  -m, --model PATH        .gguf file or safetensors directory (default: the bundled model)\n"
    "      --tokenizer PATH    a tokenizer.json file, or a folder holding one, instead of the\n"
    "                          model's own (a safetensors directory without tokenizer.json)\n"
    "  -p, --prompt TEXT       prompt (generate) or a single message (chat; else interactive)\n"
    "  -f, --file PATH         read the prompt from a regular file of at most 16 MiB\n"
    "  -n, --max-tokens N      tokens to generate, 1..1048576 (default 128)\n"
    "      --temp T            temperature, 0..100, 0 = greedy (default 0.8)\n"
    "      --top-k K           0..1048576, 0 = all (default 40)\n"
    "      --top-p P           (0, 1] (default 0.95)   --min-p P  [0, 1] (default 0.05)\n"
    "      --repeat-penalty R  (0, 100] (default 1.0)\n"
    "      --repeat-last-n N   -1..1048576, -1 = the whole sequence (default 64)\n"
    "      --frequency-penalty F  --presence-penalty P   [-2, 2] (default 0)\n"
    "      --seed S            sampling seed, 0..2^64-1\n"
    "      --stop TEXT         stop string (repeatable)\n"
    "      --ignore-eos        keep going past end-of-generation tokens\n"
    "      --spec KIND[:N]     speculative decoding: off (default), ngram (prompt lookup),\n"
    "                          suffix (a suffix trie of the text so far), draft (a draft\n"
    "                          model: the model's first quarter of layers), draft=L (its\n"
    "                          first L layers) or draft=FILE (a model with the same\n"
    "                          tokenizer); N guesses a pass at most, 1..32 (default 8;\n"
    "                          fewer where they stop paying)\n"
    "      --system TEXT       chat: the system message\n"
    "      --raw               generate: do not wrap the prompt in the chat template; the\n"
    "                          text of special tokens in it (<|im_start|>) becomes those\n"
    "                          tokens (else every prompt and message is plain text)\n"
    "      --device D          where the model runs: cpu (default), cuda (the first GPU),\n"
    "                          cuda:N, or cuda:0+1 (split over GPUs 0 and 1)\n"
    "  -t, --threads N         CPU threads, 0..1024 (default 0: the usable cores)\n"
    "      --ctx N             context per sequence, 0..131072 (default 0: the model's, <= 4096)\n"
    "      --exact             fp32 activations and KV cache (reference-exact path)\n"
    "      --precision P       activations: split16 (default) or int8 (llama.cpp's)\n"
    "      --kv TYPE           KV cache: f16 (default), q8 (int8 + a scale per row) or f32;\n"
    "                          on CUDA bf16 (default) or fp8 (e4m3)\n"
    "      --stream S          weight prefetch: auto (default: timed at load), nt or t0\n"
    "      --weights W         CUDA layer weights: bf16 (default) or fp8 (e4m3, quantized at "
    "load)\n"
    "  -v, --verbose           print model info and timings to stderr\n";

// Streams generated text to stdout as it arrives.
bool PrintPiece(std::string_view piece) {
  std::fwrite(piece.data(), 1, piece.size(), stdout);
  std::fflush(stdout);
  return true;
}

void PrintSpec(const GenerateResult& g) {
  if (g.spec_proposed == 0 && g.decode_steps == 0) return;
  std::fprintf(stderr,
               "speculation: %d of %d guesses accepted (%.0f%%), %.2f tokens per forward pass\n",
               g.spec_accepted, g.spec_proposed,
               g.spec_proposed ? 100.0 * g.spec_accepted / g.spec_proposed : 0.0,
               g.decode_steps ? static_cast<double>(g.tokens.size() - 1) / g.decode_steps : 0.0);
}

int RunOnce(Model& model, std::span<const PromptPiece> pieces, const SamplingParams& sp,
            const SpecOptions& spec, Model* draft, bool verbose) {
  std::vector<int32_t> prompt = model.Tokenize(pieces);
  auto r = Generate(model, prompt, sp, PrintPiece, spec, draft);
  std::printf("\n");
  if (!r.ok()) {
    std::fprintf(stderr, "braid: %s\n", r.status().ToString().c_str());
    return 1;
  }
  if (verbose) {
    const GenerateResult& g = *r;
    std::fprintf(stderr,
                 "prompt: %d tokens in %.3f s (%.1f tok/s); generated %zu tokens in %.3f s "
                 "(%.1f tok/s); finish: %s\n",
                 g.prompt_tokens, g.prefill_seconds, g.prompt_tokens / g.prefill_seconds,
                 g.tokens.size(), g.decode_seconds,
                 g.tokens.size() > 1 ? (g.tokens.size() - 1) / g.decode_seconds : 0.0,
                 g.finish_reason.c_str());
    if (spec.on()) PrintSpec(g);
  }
  return 0;
}

}  // namespace

int GenerateMain(const std::vector<std::string>& argv, bool chat) {
  Args args(argv);
  if (args.Flag({"-h", "--help"})) {
    std::printf("%s", kGenerateHelp);
    return 0;
  }
  ModelOptions mo = ReadModelOptions(args);
  std::string prompt = args.Str({"-p", "--prompt"}, "");
  std::string file = args.Str({"-f", "--file"}, "");
  SamplingParams sp;
  sp.max_tokens = static_cast<int>(args.Int({"-n", "--max-tokens"}, 128, 1, kMaxTokens));
  sp.temperature =
      static_cast<float>(args.Num({"--temp", "--temperature"}, sp.temperature, 0.0, 100.0));
  sp.top_k = static_cast<int>(args.Int({"--top-k"}, sp.top_k, 0, kMaxTokens));
  sp.top_p = static_cast<float>(args.Num({"--top-p"}, sp.top_p, 0.0, 1.0));
  sp.min_p = static_cast<float>(args.Num({"--min-p"}, sp.min_p, 0.0, 1.0));
  sp.repetition_penalty = static_cast<float>(args.Num({"--repeat-penalty"}, 1.0, 0.0, 100.0));
  sp.penalty_last_n = static_cast<int>(args.Int({"--repeat-last-n"}, 64, -1, kMaxTokens));
  sp.frequency_penalty = static_cast<float>(args.Num({"--frequency-penalty"}, 0.0, -2.0, 2.0));
  sp.presence_penalty = static_cast<float>(args.Num({"--presence-penalty"}, 0.0, -2.0, 2.0));
  sp.seed = args.U64({"--seed"}, sp.seed);
  sp.stop = args.All({"--stop"});
  sp.ignore_eos = args.Flag({"--ignore-eos"});
  std::string system = args.Str({"--system"}, "");
  bool raw = args.Flag({"--raw"});
  bool verbose = args.Flag({"-v", "--verbose"});
  auto spec = ParseSpecOptions(args.Str({"--spec"}, "off"));
  if (std::string e = args.Error(); !e.empty()) {
    std::fprintf(stderr, "braid %s: %s\n", chat ? "chat" : "generate", e.c_str());
    return 2;
  }
  if (Status s = sp.Validate(); !s.ok()) {
    std::fprintf(stderr, "braid: %s\n", s.message().c_str());
    return 2;
  }
  if (!spec.ok()) {
    std::fprintf(stderr, "braid %s: %s\n", chat ? "chat" : "generate",
                 spec.status().message().c_str());
    return 2;
  }
  if (!file.empty()) {
    if (Status s = ReadRegularFile(file, kMaxInputFileBytes, &prompt); !s.ok()) {
      std::fprintf(stderr, "braid %s: option -f: %s\n", chat ? "chat" : "generate",
                   s.message().c_str());
      return 2;
    }
  }
  if (!chat && prompt.empty()) {
    std::fprintf(stderr, "braid generate: give a prompt with -p TEXT or -f FILE\n");
    return 2;
  }
  auto model = Model::Open(mo);
  if (!model.ok()) {
    std::fprintf(stderr, "braid: %s\n", model.status().message().c_str());
    return 1;
  }
  Model& m = **model;
  if (verbose) PrintModelInfo(m.info());
  auto draft_model = OpenDraftModel(*spec, mo, m);
  if (!draft_model.ok()) {
    std::fprintf(stderr, "braid: %s\n", draft_model.status().message().c_str());
    return 1;
  }
  Model* draft = draft_model->get();

  std::vector<ChatMessage> messages;
  if (!system.empty()) messages.push_back({"system", system});
  if (!chat) {
    // --raw: the user wrote the whole prompt, chat markup included, so its
    // special-token text is meant as special tokens.
    if (raw) {
      const PromptPiece piece = MarkupPiece(prompt);
      return RunOnce(m, std::span<const PromptPiece>(&piece, 1), sp, *spec, draft, verbose);
    }
    messages.push_back({"user", prompt});
    return RunOnce(m, m.FormatChat(messages, true), sp, *spec, draft, verbose);
  }
  if (!prompt.empty()) {
    messages.push_back({"user", prompt});
    return RunOnce(m, m.FormatChat(messages, true), sp, *spec, draft, verbose);
  }
  // Interactive chat: one line per user turn; the whole conversation is
  // re-rendered with the chat template each turn.
  std::fprintf(stderr, "braid chat: %s — type a message, Ctrl-D to quit\n", m.info().path.c_str());
  std::string line;
  while (true) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    messages.push_back({"user", line});
    // Messages are plain text: only the chat template's markup yields special
    // tokens, so a typed "<|im_end|>" cannot close the turn.
    std::vector<int32_t> ids = m.Tokenize(m.FormatChat(messages, true));
    auto r = Generate(m, ids, sp, PrintPiece, *spec, draft);
    std::printf("\n");
    if (!r.ok()) {
      std::fprintf(stderr, "braid: %s\n", r.status().ToString().c_str());
      messages.pop_back();
      continue;
    }
    messages.push_back({"assistant", r->text});
  }
  return 0;
}

}  // namespace braid::cli
