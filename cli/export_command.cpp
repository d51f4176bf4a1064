// `troupe export`: exit 0 written, 1 a checkpoint it cannot read (named), 2 bad flags or a
// manifest that contradicts itself or its model (edited: nothing is written).
#include "cli/export_command.hpp"

#include <spdlog/spdlog.h>

#include <memory>

#include "storage/checkpoint.hpp"
#include "storage/checkpoint_export.hpp"

namespace troupe::cli {

namespace {

struct export_flags {
  std::string checkpoint, out, format = "safetensors";
  bool optimizer_state = false;
};

}  // namespace

void add_export_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<export_flags>();
  auto* cmd = app.add_subcommand("export", "Write a checkpoint's full parameters for other tools (PyTorch's state_dict names)");
  cmd->add_option("checkpoint", f->checkpoint, "A checkpoint folder (its latest) or one of its step-N folders")->required();
  cmd->add_option("out", f->out, "The file to write")->required();
  cmd->add_option("--format", f->format, "Output format: safetensors [safetensors]")->check(CLI::IsMember({"safetensors"}));
  cmd->add_flag("--optimizer-state", f->optimizer_state,
                "Also each parameter's optimizer state (<name>.exp_avg, <name>.exp_avg_sq; <name>.momentum_buffer)");
  cmd->callback([f, &exit_code] {
    try {
      const storage::export_report r = storage::export_safetensors(f->checkpoint, f->out, f->optimizer_state);
      spdlog::info("exported {} (after step {}): {} tensors, {} floats -> {}", r.checkpoint, r.step, r.tensors, r.floats,
                   f->out);
      exit_code = 0;
    } catch (const std::invalid_argument& e) {  // an output path that cannot take the file: bad input
      spdlog::error("troupe export: {}", e.what());
      exit_code = 2;
    } catch (const storage::bad_manifest& e) {
      spdlog::error("troupe export: {}", e.what());
      exit_code = 2;
    } catch (const std::exception& e) {
      spdlog::error("troupe export: {}", e.what());
      exit_code = 1;
    }
  });
}

}  // namespace troupe::cli
