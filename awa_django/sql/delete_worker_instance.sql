-- delete_worker_instance: a stopping worker removes its own snapshot. Parameters: instance_id.
DELETE FROM awa_worker_instance WHERE instance_id = %(instance_id)s::uuid
