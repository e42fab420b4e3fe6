"""What a group checks of its models before anything is written: that the key of every model
it will call is set (agents and judge), so that a run never ends in a graded empty submission
because its agent could not make one call; and that every server it calls answers.

The judge of the default evaluation (the replay agent, which calls no model, and the bundled
judge as it is) may go without its key: its leaves that need a model are then reported not
graded, as said before the work starts. Once an agent calls a model, or the judge was chosen
(``--judge``, ``--judge-model``, ``--judge-base-url``), money is spent for a score, so a
missing judge key is refused too.
"""

from __future__ import annotations

from paperbench.errors import MissingKeyError
from paperbench.llm import ModelConfig
from paperbench.runs._config import DEFAULT_JUDGE
from paperbench.runs._store import GroupConfig


def agent_models(config: GroupConfig) -> list[tuple[str, ModelConfig]]:
    """Each agent of the group that calls a model: its name and the model it calls (the
    group's ``--agent-model``/``--agent-base-url`` over its config's)."""
    found = []
    for entry in config.agents:
        model = config.agent_model or entry.model
        if model:
            found.append((entry.name, ModelConfig(model=model, base_url=config.agent_base_url)))
    return found


def judge_key_required(config: GroupConfig) -> bool:
    """Whether the judge must have its keys: an agent calls a model, or the judge was chosen
    (not the bundled default as it is)."""
    judge = config.judge
    chosen = judge.model is not None or judge.base_url is not None
    chosen = chosen or judge.identity.get("name") != DEFAULT_JUDGE
    return chosen or bool(agent_models(config))


def _missing_key(config: ModelConfig) -> str | None:
    from paperbench.llm._registry import resolve

    _, target = resolve(config, require_key=False)
    return target.missing_key


def refuse_missing_keys(config: GroupConfig) -> None:
    """Refuse a group that would call a model whose key is not set (see the module).

    Raises:
        MissingKeyError: naming the variable to set and the flag that chose the model.
    """
    flag = "--agent-model" if config.agent_model else "--agent"
    for name, model in agent_models(config):
        variable = _missing_key(model)
        if variable is not None:
            raise MissingKeyError(
                f"{flag}: agent {name} calls {model.model} and {variable} is not set; set it "
                "in the environment or a .env file, or give --agent-base-url for a server "
                "that needs no key"
            )
    if not config.judge.key_set and judge_key_required(config):
        from paperbench.judge import load_judge_config, missing_keys
        from paperbench.judge._job import ModelSettings

        loaded = load_judge_config(config.judge.ref)
        settings = ModelSettings(model=config.judge.model, base_url=config.judge.base_url)
        variables = ", ".join(missing_keys(loaded, settings)) or "its key"
        models = ", ".join(sorted(set(config.judge.identity.get("models", {}).values())))
        if config.judge.model:
            models = config.judge.model
        flag = "--judge-model" if config.judge.model else "--judge"
        raise MissingKeyError(
            f"{flag}: the judge {config.judge.identity.get('name')} calls {models} and "
            f"{variables} is not set; set it in the environment or a .env file, or give "
            "--judge-base-url for a server that needs no key"
        )


def refuse_unfit_judge(config: GroupConfig) -> None:
    """Refuse a judge whose fixed parts cannot fit the window of the model it would call
    (:func:`paperbench.judge._faithful.check_windows`), before the group's runs start rather
    than when they reach grading.

    Raises:
        ConfigError: one line naming the model, its window and what does not fit.
    """
    from paperbench.judge import load_judge_config
    from paperbench.judge._faithful import check_windows
    from paperbench.judge._job import ModelSettings

    settings = ModelSettings(model=config.judge.model, base_url=config.judge.base_url)
    check_windows(load_judge_config(config.judge.ref), settings)


def group_servers(config: GroupConfig) -> list[tuple[str, ModelConfig]]:
    """Each model the group calls with the flag that chose its server: the agents' and,
    when it has its keys, the judge's."""
    agent_flag = "--agent-base-url" if config.agent_base_url else "--agent"
    servers = [(agent_flag, model) for _, model in agent_models(config)]
    judge = config.judge
    if judge.key_set:
        flag = "--judge-base-url" if judge.base_url else "--judge"
        models = judge.identity.get("models", {}).values()
        servers += [
            (flag, ModelConfig(model=judge.model or model, base_url=judge.base_url))
            for model in sorted(set(models))
        ]
    return servers


async def refuse_silent_servers(config: GroupConfig) -> None:
    """One request to each server the group's models call (not the providers' own APIs):
    one that does not answer fails the command before anything is written; with
    ``--batch``, a judge server without the batch API's routes is refused too.

    Raises:
        ModelUnavailableError: naming the flag and the URL.
    """
    from paperbench.llm._probe import probe_batch_routes, probe_servers

    servers = group_servers(config)
    await probe_servers(servers)
    if config.judge.batch:
        judge = [(flag, model) for flag, model in servers if flag.startswith("--judge")]
        await probe_batch_routes(judge)
