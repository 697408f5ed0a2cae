-- Wakes the workers when a job of a lock ends: Procrastinate notifies only when a job is inserted, so a
-- message waiting behind its conversation's previous one would otherwise start at the next poll.
CREATE FUNCTION switchyard_notify_lock_released() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('procrastinate_queue_v1#' || NEW.queue_name,
                      json_build_object('type', 'job_inserted', 'job_id', NEW.id)::text);
    RETURN NEW;
END;
$$;
CREATE TRIGGER switchyard_jobs_lock_released AFTER UPDATE OF status ON procrastinate_jobs
    FOR EACH ROW WHEN (NEW.lock IS NOT NULL AND NEW.status NOT IN ('todo', 'doing'))
    EXECUTE FUNCTION switchyard_notify_lock_released();
