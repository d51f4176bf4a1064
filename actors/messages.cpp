// Registration of every message type, so the middleman can carry each of them.
#include "actors/messages.hpp"

namespace troupe {

void add_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<tensor>("troupe::tensor");
  cfg.add_message_type<batch>("troupe::batch");
  cfg.add_message_type<batch_request>("troupe::batch_request");
  cfg.add_message_type<batch_msg>("troupe::batch_msg");
  cfg.add_message_type<unit_request>("troupe::unit_request");
  cfg.add_message_type<unit_grant>("troupe::unit_grant");
  cfg.add_message_type<update_ready>("troupe::update_ready");
  cfg.add_message_type<update_commit>("troupe::update_commit");
  cfg.add_message_type<step_failed>("troupe::step_failed");
  cfg.add_message_type<eval_batch_request>("troupe::eval_batch_request");
  cfg.add_message_type<eval_batch_msg>("troupe::eval_batch_msg");
  cfg.add_message_type<step_order>("troupe::step_order");
  cfg.add_message_type<eval_order>("troupe::eval_order");
  cfg.add_message_type<eval_report>("troupe::eval_report");
  cfg.add_message_type<gradients_msg>("troupe::gradients_msg");
  cfg.add_message_type<observed_gradients>("troupe::observed_gradients");
  cfg.add_message_type<store_write>("troupe::store_write");
  cfg.add_message_type<store_read>("troupe::store_read");
  cfg.add_message_type<store_done>("troupe::store_done");
  cfg.add_message_type<offload_stats_request>("troupe::offload_stats_request");
  cfg.add_message_type<offload_stats>("troupe::offload_stats");
  cfg.add_message_type<shard_state_request>("troupe::shard_state_request");
  cfg.add_message_type<shard_state>("troupe::shard_state");
  cfg.add_message_type<shard_state_restored>("troupe::shard_state_restored");
  cfg.add_message_type<checkpoint_order>("troupe::checkpoint_order");
  cfg.add_message_type<checkpoint_write>("troupe::checkpoint_write");
  cfg.add_message_type<checkpoint_part>("troupe::checkpoint_part");
  cfg.add_message_type<params_msg>("troupe::params_msg");
  cfg.add_message_type<params_request>("troupe::params_request");
  // collectives and data parallelism
  cfg.add_message_type<tensor_slice>("troupe::tensor_slice");
  cfg.add_message_type<collective_request>("troupe::collective_request");
  cfg.add_message_type<collective_result>("troupe::collective_result");
  cfg.add_message_type<device_group_id>("troupe::device_group_id");
  cfg.add_message_type<ring_chunk>("troupe::ring_chunk");
  cfg.add_message_type<ring_setup>("troupe::ring_setup");
  cfg.add_message_type<collective_dump_request>("troupe::collective_dump_request");
  cfg.add_message_type<collective_log_entry>("troupe::collective_log_entry");
  cfg.add_message_type<collective_log>("troupe::collective_log");
  // pipeline
  cfg.add_message_type<pipeline_tensor_msg>("troupe::pipeline_tensor_msg");
  cfg.add_message_type<stage_step_record>("troupe::stage_step_record");
  cfg.add_message_type<pipeline_status_request>("troupe::pipeline_status_request");
  cfg.add_message_type<pipeline_status>("troupe::pipeline_status");
  cfg.add_message_type<pipeline_failure>("troupe::pipeline_failure");
  cfg.add_message_type<pipeline_params_request>("troupe::pipeline_params_request");
  cfg.add_message_type<pipeline_params_msg>("troupe::pipeline_params_msg");
  // across processes
  cfg.add_message_type<join_request>("troupe::join_request");
  cfg.add_message_type<join_reply>("troupe::join_reply");
  cfg.add_message_type<process_endpoints>("troupe::process_endpoints");
  cfg.add_message_type<worker_ready>("troupe::worker_ready");
  cfg.add_message_type<mesh_addresses>("troupe::mesh_addresses");
  cfg.add_message_type<job_end>("troupe::job_end");
  cfg.add_message_type<server_ready>("troupe::server_ready");
  cfg.add_message_type<train_summary::server_update>("troupe::server_update");
  cfg.add_message_type<server_records>("troupe::server_records");
}

}  // namespace troupe
