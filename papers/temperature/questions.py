"""The project's own question set in SciQ's format, for Fig. 3 on a small pretrained model.

SciQ (CC BY-NC 3.0) is not shipped here. These questions are written for this project: short
science and general-knowledge facts (element symbols, capitals, continents, units, instruments,
animal classes and young, counts, processes, organs, discoveries), each with its correct answer,
three plausible distractors (other answers of the same kind of fact) and a support sentence that
states the fact, as SciQ's items do. They are generated from the fact tables below, so a question
and its distractors are always of one kind: the TopK retriever finds demonstrations of the same
kind, and a noisy demonstration's wrong label is relevant but wrong, as in the paper's App. K.3.

Licence: written for this project, released with it (public domain, CC0 1.0, for the facts and
wording; the facts themselves are common knowledge).

    python -m papers.temperature.questions data/science_qa     # writes train.jsonl and test.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

SEED = 4
TEST_SHARE = 1 / 3

# (question template, support templates, fact table: subject -> answer); {s} subject, {a} answer.
TABLES: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
    "element_symbol": (
        "What is the chemical symbol of {s}?",
        (
            "Every element has a one- or two-letter chemical symbol; the symbol of {s} is {a}.",
            "In the periodic table, {s} is written with the chemical symbol {a}.",
        ),
        {
            "hydrogen": "H",
            "helium": "He",
            "lithium": "Li",
            "carbon": "C",
            "nitrogen": "N",
            "oxygen": "O",
            "fluorine": "F",
            "neon": "Ne",
            "sodium": "Na",
            "magnesium": "Mg",
            "aluminium": "Al",
            "silicon": "Si",
            "phosphorus": "P",
            "sulfur": "S",
            "chlorine": "Cl",
            "argon": "Ar",
            "potassium": "K",
            "calcium": "Ca",
            "iron": "Fe",
            "copper": "Cu",
            "zinc": "Zn",
            "silver": "Ag",
            "tin": "Sn",
            "iodine": "I",
            "gold": "Au",
            "mercury": "Hg",
            "lead": "Pb",
            "uranium": "U",
            "nickel": "Ni",
            "platinum": "Pt",
            "cobalt": "Co",
            "manganese": "Mn",
            "bromine": "Br",
            "barium": "Ba",
            "tungsten": "W",
        },
    ),
    "capital": (
        "What is the capital city of {s}?",
        (
            "{a} is the capital city of {s} and the seat of its government.",
            "The government of {s} sits in its capital, {a}.",
        ),
        {
            "France": "Paris",
            "Germany": "Berlin",
            "Italy": "Rome",
            "Spain": "Madrid",
            "Portugal": "Lisbon",
            "Japan": "Tokyo",
            "China": "Beijing",
            "Russia": "Moscow",
            "Egypt": "Cairo",
            "Kenya": "Nairobi",
            "Canada": "Ottawa",
            "Australia": "Canberra",
            "Brazil": "Brasilia",
            "Argentina": "Buenos Aires",
            "Mexico": "Mexico City",
            "India": "New Delhi",
            "Norway": "Oslo",
            "Sweden": "Stockholm",
            "Finland": "Helsinki",
            "Denmark": "Copenhagen",
            "Poland": "Warsaw",
            "Austria": "Vienna",
            "Greece": "Athens",
            "Ireland": "Dublin",
            "Hungary": "Budapest",
            "Peru": "Lima",
            "Chile": "Santiago",
            "Thailand": "Bangkok",
            "South Korea": "Seoul",
            "Turkey": "Ankara",
            "Iran": "Tehran",
            "Belgium": "Brussels",
            "Netherlands": "Amsterdam",
            "Switzerland": "Bern",
            "Cuba": "Havana",
            "Colombia": "Bogota",
            "Nigeria": "Abuja",
            "Ethiopia": "Addis Ababa",
            "Indonesia": "Jakarta",
            "Vietnam": "Hanoi",
        },
    ),
    "continent": (
        "On which continent is {s}?",
        ("{s} is a country that lies in {a}.", "Maps of {a} show {s} among the countries of that continent."),
        {
            "Kenya": "Africa",
            "Egypt": "Africa",
            "Nigeria": "Africa",
            "Ghana": "Africa",
            "Morocco": "Africa",
            "France": "Europe",
            "Poland": "Europe",
            "Norway": "Europe",
            "Italy": "Europe",
            "Greece": "Europe",
            "Japan": "Asia",
            "India": "Asia",
            "Thailand": "Asia",
            "Mongolia": "Asia",
            "Nepal": "Asia",
            "Brazil": "South America",
            "Peru": "South America",
            "Chile": "South America",
            "Argentina": "South America",
            "Colombia": "South America",
            "Canada": "North America",
            "Mexico": "North America",
            "Cuba": "North America",
            "Guatemala": "North America",
            "Fiji": "Oceania",
            "New Zealand": "Oceania",
            "Samoa": "Oceania",
        },
    ),
    "si_unit": (
        "What is the SI unit of {s}?",
        (
            "In the International System of Units, {s} is measured in units called {a}.",
            "Scientists express {s} in {a}, its SI unit.",
        ),
        {
            "force": "newton",
            "energy": "joule",
            "power": "watt",
            "electric current": "ampere",
            "electric charge": "coulomb",
            "voltage": "volt",
            "electrical resistance": "ohm",
            "frequency": "hertz",
            "pressure": "pascal",
            "mass": "kilogram",
            "length": "metre",
            "time": "second",
            "thermodynamic temperature": "kelvin",
            "amount of substance": "mole",
            "luminous intensity": "candela",
            "magnetic flux": "weber",
            "capacitance": "farad",
            "inductance": "henry",
        },
    ),
    "instrument": (
        "Which instrument is used to measure {s}?",
        ("A {a} is the instrument used to measure {s}.", "To measure {s}, scientists use a {a}."),
        {
            "temperature": "thermometer",
            "air pressure": "barometer",
            "earthquakes": "seismograph",
            "electric current": "ammeter",
            "voltage": "voltmeter",
            "wind speed": "anemometer",
            "humidity": "hygrometer",
            "rainfall": "rain gauge",
            "mass": "balance",
            "angles": "protractor",
            "blood pressure": "sphygmomanometer",
            "radioactivity": "Geiger counter",
            "volume of a liquid": "graduated cylinder",
            "electrical resistance": "ohmmeter",
            "the density of a liquid": "hydrometer",
        },
    ),
    "animal_class": (
        "To which class of vertebrates does the {s} belong?",
        (
            "The {s} is classified as a {a}, like the other members of its class.",
            "Biologists classify the {s} as a vertebrate of the {a} class.",
        ),
        {
            "dolphin": "mammal",
            "bat": "mammal",
            "whale": "mammal",
            "horse": "mammal",
            "elephant": "mammal",
            "kangaroo": "mammal",
            "penguin": "bird",
            "ostrich": "bird",
            "eagle": "bird",
            "owl": "bird",
            "parrot": "bird",
            "crocodile": "reptile",
            "lizard": "reptile",
            "turtle": "reptile",
            "snake": "reptile",
            "frog": "amphibian",
            "toad": "amphibian",
            "salamander": "amphibian",
            "newt": "amphibian",
            "shark": "fish",
            "salmon": "fish",
            "tuna": "fish",
            "trout": "fish",
            "goldfish": "fish",
        },
    ),
    "young": (
        "What is a young {s} called?",
        (
            "A young {s} is called a {a}.",
            "When a {s} is born or hatched, the young animal is known as a {a}.",
        ),
        {
            "cat": "kitten",
            "dog": "puppy",
            "cow": "calf",
            "horse": "foal",
            "sheep": "lamb",
            "goat": "kid",
            "frog": "tadpole",
            "bear": "cub",
            "lion": "cub",
            "duck": "duckling",
            "goose": "gosling",
            "swan": "cygnet",
            "kangaroo": "joey",
            "deer": "fawn",
            "pig": "piglet",
            "owl": "owlet",
            "eagle": "eaglet",
            "butterfly": "caterpillar",
            "chicken": "chick",
            "hare": "leveret",
        },
    ),
    "count": (
        "How many {s}?",
        ("The answer to how many {s} is {a}.", "If you count how many {s}, the number you get is {a}."),
        {
            "legs does a spider have": "eight",
            "legs does an insect have": "six",
            "planets are in the Solar System": "eight",
            "chambers does the human heart have": "four",
            "sides does a hexagon have": "six",
            "sides does a triangle have": "three",
            "sides does a pentagon have": "five",
            "arms does an octopus have": "eight",
            "bones are in the adult human body": "206",
            "days are in a leap year": "366",
            "hours are in a day": "24",
            "minutes are in an hour": "60",
            "continents are there on Earth": "seven",
            "teeth does an adult human usually have": "32",
            "lungs does a human have": "two",
            "wings does a bee have": "four",
            "legs does a crab have": "ten",
            "strands does a DNA molecule have": "two",
        },
    ),
    "process": (
        "What is the process called in which {s}?",
        ("The process in which {s} is called {a}.", "{A} is the name given to the process in which {s}."),
        {
            "a liquid turns into a gas": "evaporation",
            "a gas turns into a liquid": "condensation",
            "a liquid turns into a solid": "freezing",
            "a solid turns into a liquid": "melting",
            "a solid turns directly into a gas": "sublimation",
            "plants use sunlight to make sugar from carbon dioxide and water": "photosynthesis",
            "cells break down glucose to release energy": "respiration",
            "one cell divides into two identical cells": "mitosis",
            "rock is broken down by wind and water": "weathering",
            "water moves through a membrane from a dilute to a concentrated solution": "osmosis",
            "particles spread from high to low concentration": "diffusion",
            "a heavy nucleus splits into smaller nuclei": "fission",
            "light nuclei join to form a heavier nucleus": "fusion",
            "light bends as it passes from one medium into another": "refraction",
            "a caterpillar changes into a butterfly": "metamorphosis",
            "living things with useful traits survive and reproduce more": "natural selection",
        },
    ),
    "organ": (
        "Which organ of the human body {s}?",
        ("In the human body, the {a} {s}.", "Among the organs of the body, it is the {a} that {s}."),
        {
            "pumps blood through the blood vessels": "heart",
            "exchanges oxygen and carbon dioxide": "lungs",
            "filters waste from the blood to make urine": "kidneys",
            "controls thought and memory": "brain",
            "stores bile made by the liver": "gallbladder",
            "produces insulin": "pancreas",
            "absorbs most nutrients from digested food": "small intestine",
            "detoxifies chemicals and makes bile": "liver",
            "covers and protects the whole body": "skin",
            "stores urine before it leaves the body": "bladder",
            "begins the digestion of protein with acid": "stomach",
            "absorbs water from undigested food": "large intestine",
            "detects light and forms images": "eye",
            "detects sound and helps keep balance": "ear",
        },
    ),
    "discovery": (
        "Who {s}?",
        ("{a} {s}, a landmark in the history of science.", "The scientist who {s} was {a}."),
        {
            "proposed the theory of general relativity": "Albert Einstein",
            "formulated the three laws of motion": "Isaac Newton",
            "proposed evolution by natural selection": "Charles Darwin",
            "discovered penicillin": "Alexander Fleming",
            "discovered radium and polonium": "Marie Curie",
            "created the first periodic table of the elements": "Dmitri Mendeleev",
            "discovered the laws of inheritance by breeding pea plants": "Gregor Mendel",
            "developed the first rabies vaccine": "Louis Pasteur",
            "proposed that the Sun is at the centre of the Solar System": "Nicolaus Copernicus",
            "discovered the electron": "J. J. Thomson",
            "discovered the atomic nucleus": "Ernest Rutherford",
            "first used a telescope to observe the moons of Jupiter": "Galileo Galilei",
            "formulated the equations of electromagnetism": "James Clerk Maxwell",
            "invented the first practical telephone": "Alexander Graham Bell",
            "proposed the theory of continental drift": "Alfred Wegener",
            "described the structure of DNA with Francis Crick": "James Watson",
        },
    ),
    "planet": (
        "Which planet {s}?",
        ("Of all the planets, {a} is the one that {s}.", "Astronomers know that {a} {s}."),
        {
            "is closest to the Sun": "Mercury",
            "is the largest in the Solar System": "Jupiter",
            "is known as the Red Planet": "Mars",
            "has the most famous ring system": "Saturn",
            "is the hottest in the Solar System": "Venus",
            "is farthest from the Sun": "Neptune",
            "rotates on its side": "Uranus",
            "is the only one known to support life": "Earth",
        },
    ),
    "gas": (
        "Which gas {s}?",
        ("The gas that {s} is {a}.", "{A} is the gas that {s}."),
        {
            "do plants take in for photosynthesis": "carbon dioxide",
            "do plants release in photosynthesis": "oxygen",
            "makes up most of Earth's atmosphere": "nitrogen",
            "is the lightest element": "hydrogen",
            "fills party balloons so that they float": "helium",
            "glows red in advertising signs": "neon",
            "in the upper atmosphere absorbs ultraviolet light": "ozone",
            "is the main component of natural gas": "methane",
            "is used to disinfect swimming pools": "chlorine",
        },
    ),
}


def _fill(template: str, subject: str, answer: str) -> str:
    text = template.format(s=subject, a=answer, A=answer[:1].upper() + answer[1:])
    return text[:1].upper() + text[1:]


def items() -> list[dict]:
    """Every item, in table order, with SciQ's fields and a ``kind`` (the table's name)."""
    rng = np.random.default_rng(SEED)
    out = []
    for kind, (question, supports, facts) in TABLES.items():
        answers = sorted(set(facts.values()))
        for index, (subject, answer) in enumerate(facts.items()):
            others = [a for a in answers if a != answer]
            distractors = [others[i] for i in rng.choice(len(others), size=3, replace=False)]
            out.append(
                {
                    "question": _fill(question, subject, answer),
                    "support": _fill(supports[index % len(supports)], subject, answer),
                    "correct_answer": answer,
                    "distractor1": distractors[0],
                    "distractor2": distractors[1],
                    "distractor3": distractors[2],
                    "kind": kind,
                }
            )
    return out


def split(records: list[dict]) -> tuple[list[dict], list[dict]]:
    """A seeded split, TEST_SHARE of each kind to test (every test question has same-kind demonstrations)."""
    rng = np.random.default_rng([SEED, 1])
    train, test = [], []
    for kind in TABLES:
        group = [r for r in records if r["kind"] == kind]
        order = rng.permutation(len(group))
        n_test = round(len(group) * TEST_SHARE)
        test += [group[i] for i in order[:n_test]]
        train += [group[i] for i in order[n_test:]]
    # mixed kinds in file order, so a prefix (the sweeps' n_test) covers every kind
    return [train[i] for i in rng.permutation(len(train))], [test[i] for i in rng.permutation(len(test))]


def write(directory: str | Path) -> tuple[Path, Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    train, test = split(items())
    paths = directory / "train.jsonl", directory / "test.jsonl"
    for path, records in zip(paths, (train, test)):
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the project's SciQ-format question set.")
    parser.add_argument("directory")
    args = parser.parse_args(argv)
    for path in write(args.directory):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
