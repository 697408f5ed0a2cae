-- Wakes the workers when a job of a lock ends (finished, or deleted as it succeeds): Procrastinate
-- notifies only when a job is inserted, so a message waiting behind its conversation's previous one
-- would otherwise start at the next poll.
CREATE FUNCTION switchyard_notify_lock_released() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('procrastinate_queue_v1#' || OLD.queue_name,
                      json_build_object('type', 'job_inserted', 'job_id', OLD.id)::text);
    RETURN NULL;
END;
$$;
CREATE TRIGGER switchyard_jobs_lock_released AFTER UPDATE OF status ON procrastinate_jobs
    FOR EACH ROW WHEN (NEW.lock IS NOT NULL AND NEW.status NOT IN ('todo', 'doing'))
    EXECUTE FUNCTION switchyard_notify_lock_released();
CREATE TRIGGER switchyard_jobs_lock_deleted AFTER DELETE ON procrastinate_jobs
    FOR EACH ROW WHEN (OLD.lock IS NOT NULL)
    EXECUTE FUNCTION switchyard_notify_lock_released();
