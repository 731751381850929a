"""A statement's prepared form (store/prepared.py): what PostgreSQL is sent."""

from jarvis_agents.store.prepared import form_of


def test_each_parameter_is_numbered_once_in_order_of_first_use() -> None:
    form = form_of("UPDATE t SET a = %(a)s WHERE id = %(id)s AND a <> %(a)s")
    assert form.prepare == f"PREPARE {form.name} AS UPDATE t SET a = $1 WHERE id = $2 AND a <> $1"
    assert form.execute == f"EXECUTE {form.name} (%(a)s, %(id)s)"


def test_a_literal_percent_is_sent_as_one_and_a_statement_without_parameters_has_no_list() -> None:
    form = form_of("SELECT 'x' LIKE '%%y'")
    assert form.prepare.endswith("AS SELECT 'x' LIKE '%y'")
    assert form.execute == f"EXECUTE {form.name}"


def test_the_name_is_the_texts_so_another_text_never_runs_under_it() -> None:
    assert form_of("SELECT 1").name == form_of("SELECT 1").name
    assert form_of("SELECT 1").name != form_of("SELECT 2").name
    assert form_of("SELECT 1").name.startswith("jarvis_")
