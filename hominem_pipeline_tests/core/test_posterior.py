import numpy as np
import pytest

from hominem_pipeline.core.attune.posterior import (
    LaplacePosterior,
    answer_probability,
    bald,
    epig,
    noise_from_consistency,
)


def answers(n: int, w: np.ndarray, noise: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    d = rng.normal(size=(n, len(w)))
    y = (rng.random(n) < answer_probability(d @ w, noise)).astype(float)
    return d, y


def test_consistency_gives_the_flip_rate_that_produces_it():
    for eps in (0.0, 0.05, 0.2, 0.4):
        assert noise_from_consistency((1 - eps) ** 2 + eps**2) == pytest.approx(eps, abs=1e-9)
    assert noise_from_consistency(None, default=0.1) == 0.1
    assert noise_from_consistency(0.3) < 0.5
    with pytest.raises(ValueError, match="between 0 and 1"):
        noise_from_consistency(1.5)


def test_laplace_recovers_the_weights_and_narrows_with_answers():
    w = np.array([2.0, -1.0, 0.0, 0.5])
    d, y = answers(3000, w, 0.1)
    post = LaplacePosterior.fit(d, y, prior_precision=1.0, noise=0.1)
    assert np.corrcoef(post.mean, w)[0, 1] > 0.98
    few = LaplacePosterior.fit(d[:100], y[:100], prior_precision=1.0, noise=0.1)
    probe = np.eye(4)
    assert (post.latent(probe)[1] < few.latent(probe)[1]).all()
    # a noisier rater's answers carry less: the same answers read with more noise leave a wider posterior
    noisy = LaplacePosterior.fit(d[:100], y[:100], prior_precision=1.0, noise=0.3)
    assert (noisy.latent(probe)[1] > few.latent(probe)[1]).all()


def test_bald_is_high_where_the_posterior_is_unsure_and_zero_where_nothing_differs():
    rng = np.random.default_rng(1)
    # answers only ever along the first two directions: the last two stay as unsure as the prior
    d = np.zeros((400, 4))
    d[:, :2] = rng.normal(size=(400, 2))
    y = (rng.random(400) < answer_probability(d @ np.array([1.0, -1.0, 0.0, 0.0]), 0.05)).astype(float)
    post = LaplacePosterior.fit(d, y, prior_precision=1.0, noise=0.05)
    seen, unseen, same = np.array([[1.0, 0, 0, 0]]), np.array([[0, 0, 1.0, 0]]), np.zeros((1, 4))
    assert bald(post, unseen)[0] > 5 * bald(post, seen)[0]
    assert bald(post, same)[0] == pytest.approx(0.0, abs=1e-9)
    # the closed form agrees with Monte Carlo over posterior samples
    draws = post.samples(20000, np.random.default_rng(2))
    for x in (seen, unseen):
        p = answer_probability(draws @ x[0], 0.05)
        h = lambda q: -(q * np.log2(q) + (1 - q) * np.log2(1 - q))  # noqa: E731
        assert bald(post, x)[0] == pytest.approx(h(p.mean()) - h(p).mean(), abs=0.02)


def test_a_noisy_rater_makes_every_answer_worth_less():
    post = LaplacePosterior.prior(3, prior_precision=0.25, noise=0.0)
    x = np.array([[1.0, 1.0, 0.0]])
    clean = bald(post, x)[0]
    noisy = bald(LaplacePosterior.prior(3, prior_precision=0.25, noise=0.3), x)[0]
    assert clean > 2 * noisy > 0


def test_epig_counts_only_what_the_targets_depend_on():
    post = LaplacePosterior.prior(4, prior_precision=0.5, noise=0.05)
    targets = np.zeros((32, 4))
    targets[:, 0] = np.random.default_rng(3).normal(size=32)
    aligned, orthogonal = np.array([[2.0, 0, 0, 0]]), np.array([[0, 0, 2.0, 0]])
    values = epig(post, np.vstack([aligned, orthogonal]), targets, np.random.default_rng(4), draws=512)
    assert values[0] > 0.02 and values[1] < values[0] / 10


def test_fit_names_bad_input():
    with pytest.raises(ValueError, match="flip rate"):
        LaplacePosterior.fit(np.ones((2, 2)), np.ones(2), 1.0, noise=0.5)
    with pytest.raises(ValueError, match="same pairs"):
        LaplacePosterior.fit(np.ones((2, 2)), np.ones(3), 1.0, noise=0.1)


def test_rater_noise_starts_at_the_default_and_follows_the_repeats():
    from hominem_pipeline.core.attune.posterior import rater_noise

    assert rater_noise(0, 0, 0.1) == pytest.approx(0.1)
    assert rater_noise(2, 2, 0.1) < 0.1  # two agreeing repeats: a little more consistent than assumed
    assert rater_noise(200, 200, 0.1) < 0.01
    assert rater_noise(100, 200, 0.1) > 0.4  # half the repeats answered the other way: near a coin toss
    with pytest.raises(ValueError, match="count of repeats"):
        rater_noise(3, 2, 0.1)


def test_the_pick_asks_the_most_informative_pair_and_says_why_in_words():
    from hominem_pipeline.core.attune.posterior import expected_information
    from hominem_pipeline.core.attune.selection import pick_informative

    post = LaplacePosterior.prior(2, prior_precision=1.0, noise=0.1)
    worth = expected_information(post, np.array([[0.1, 0.0], [3.0, 0.0], [0.0, 0.5]]))
    best = pick_informative(worth, 0.0, np.random.default_rng(0))
    assert best.index == 1 and best.by == "information" and best.value == pytest.approx(worth.value[1])
    assert best.reason.startswith("asked because the model cannot tell which you would choose")
    assert "would settle about" in best.reason and set(best.parts) == {"information", "settles", "p_a"}
    random = pick_informative(worth, 1.0, np.random.default_rng(0))
    assert random.by == "random" and random.reason.startswith("picked at random (100% of questions are)")
    with pytest.raises(ValueError, match="epig needs target pairs"):
        expected_information(post, np.ones((2, 2)), "epig")


def test_design_values_what_the_answers_so_far_leave_open_and_what_stands_for_many():
    from hominem_pipeline.core.attune.design import design_worth
    from hominem_pipeline.core.attune.selection import pick_informative

    rng = np.random.default_rng(0)
    centre = rng.normal(size=(2, 8))
    # five pairs alike (around one pair of replies), one pair unlike any other
    a = np.concatenate([centre[0] + 0.05 * rng.normal(size=(5, 8)), rng.normal(size=(1, 8)) + 3.0])
    b = np.concatenate([centre[1] + 0.05 * rng.normal(size=(5, 8)), rng.normal(size=(1, 8)) - 3.0])
    fresh = design_worth(a, b, np.zeros((0, 8)), np.zeros((0, 8)))
    assert fresh.shape == (6,) and np.all((fresh >= 0) & (fresh <= 1))
    assert fresh[:5].min() > fresh[5]  # one answer about the five alike settles more of the pool's doubt
    # once pairs like the five are answered, the unlike one is worth most
    answered = design_worth(a, b, np.repeat(centre[:1], 4, 0), np.repeat(centre[1:], 4, 0))
    assert int(np.argmax(answered)) == 5 and answered[:5].max() < fresh[:5].min()
    # answered in the other order (rejected first) it is the same pair: its variance does not depend on the answer
    flipped = design_worth(a, b, np.repeat(centre[1:], 4, 0), np.repeat(centre[:1], 4, 0))
    assert np.allclose(flipped, answered)
    assert design_worth(a[:0], b[:0], a, b).shape == (0,)
    post = LaplacePosterior.prior(8, prior_precision=1.0, noise=0.1)
    from hominem_pipeline.core.attune.posterior import expected_information, with_design

    worth = with_design(
        expected_information(post, a - b), a, b, np.repeat(centre[:1], 4, 0), np.repeat(centre[1:], 4, 0)
    )
    best = pick_informative(worth, 0.0, np.random.default_rng(0))
    assert best.index == 5 and best.parts["information"] == pytest.approx(answered[5])
    assert best.reason.endswith(f"settle about {answered[5]:.0%} of its doubt over the pairs you could be asked")
